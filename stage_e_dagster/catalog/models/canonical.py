"""The canonical catalogue: real expansions and printings that Stage D votes for."""

from __future__ import annotations

from datetime import date

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..base import Base, intpk


class Expansion(Base):
    """A set. Its lower-cased ``code`` is the set-code lexicon Stage C's OCR parse is checked against."""

    __tablename__ = "expansions"

    id: Mapped[intpk]
    code: Mapped[str] = mapped_column(sa.String(16), unique=True, comment="lower-case set code")
    name: Mapped[str] = mapped_column(sa.String(200))
    released_at: Mapped[date | None] = mapped_column(sa.Date)
    scryfall_id: Mapped[str | None] = mapped_column(sa.String(36), unique=True)

    printings: Mapped[list["Printing"]] = relationship(back_populates="expansion")


class Printing(Base):
    """One real printing: a card face as printed in one set, under one collector number and language."""

    __tablename__ = "printings"
    __table_args__ = (sa.UniqueConstraint("expansion_id", "collector_number", "lang"),)

    id: Mapped[intpk]
    scryfall_id: Mapped[str | None] = mapped_column(sa.String(36), unique=True)
    expansion_id: Mapped[int] = mapped_column(sa.ForeignKey("expansions.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(300), comment="double-faced cards as 'Front // Back'")
    normalized_name: Mapped[str] = mapped_column(sa.String(300), index=True)
    collector_number: Mapped[str] = mapped_column(sa.String(16))
    lang: Mapped[str] = mapped_column(sa.String(8), default="en")
    artist: Mapped[str | None] = mapped_column(sa.String(200))
    border_color: Mapped[str | None] = mapped_column(sa.String(16))
    frame: Mapped[str | None] = mapped_column(sa.String(16), comment="Scryfall frame: 1993, 1997, 2003, 2015, future")
    layout: Mapped[str | None] = mapped_column(sa.String(32))
    released_at: Mapped[date | None] = mapped_column(sa.Date)
    image_phash: Mapped[int | None] = mapped_column(sa.BigInteger, comment="signed 64-bit pHash of the whole card")
    art_phash: Mapped[int | None] = mapped_column(sa.BigInteger, comment="signed 64-bit pHash of the art box")

    expansion: Mapped[Expansion] = relationship(back_populates="printings")
