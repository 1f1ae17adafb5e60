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
    card_count: Mapped[int | None] = mapped_column(
        sa.Integer, comment="Scryfall's card_count for the set; NULL when not imported"
    )
    printed_size: Mapped[int | None] = mapped_column(
        sa.Integer, comment="Scryfall's printed_size: the total printed after the number"
    )
    # `stage-e catalog fetch-symbols` renders the icon at this URI; Scryfall's URI carries the icon's
    # version (``?1774843200``), so a shape taken from another URI is stale and fetched again.
    symbol_svg_uri: Mapped[str | None] = mapped_column(
        sa.String(500), comment="Scryfall icon_svg_uri: the set symbol's SVG")
    symbol_shape: Mapped[bytes | None] = mapped_column(
        sa.LargeBinary(128),
        comment="the set symbol's silhouette (catalog/symbol_shape.py); NULL when not rendered")
    symbol_shape_uri: Mapped[str | None] = mapped_column(
        sa.String(500), comment="the URI symbol_shape was rendered from; NULL when from a local SVG")

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
    # Uploads are named after what is printed on the card, which for a German or French printing is
    # not the English ``name``; Stage D's name index files the printing under these too.
    printed_name: Mapped[str | None] = mapped_column(
        sa.String(300), comment="the name as printed in this printing's language (Scryfall printed_name)")
    face_names: Mapped[list[str] | None] = mapped_column(
        sa.JSON, comment="card_faces[].name of a multi-face printing, front first")
    printed_face_names: Mapped[list[str] | None] = mapped_column(
        sa.JSON, comment="card_faces[].printed_name of a multi-face printing, front first")
    collector_number: Mapped[str] = mapped_column(sa.String(16))
    lang: Mapped[str] = mapped_column(sa.String(8), default="en")
    artist: Mapped[str | None] = mapped_column(sa.String(200))
    border_color: Mapped[str | None] = mapped_column(sa.String(16))
    frame: Mapped[str | None] = mapped_column(sa.String(16), comment="Scryfall frame: 1993, 1997, 2003, 2015, future")
    layout: Mapped[str | None] = mapped_column(sa.String(32))
    released_at: Mapped[date | None] = mapped_column(sa.Date)
    image_phash: Mapped[int | None] = mapped_column(sa.BigInteger, comment="signed 64-bit pHash of the whole card")
    art_phash: Mapped[int | None] = mapped_column(sa.BigInteger, comment="signed 64-bit pHash of the art box")
    # `stage-e catalog hash-art` fetches the art from here; a Scryfall URL carries the image's version
    # (``?1562928153``), so a hash whose source URL differs from the current one is stale.
    art_crop_url: Mapped[str | None] = mapped_column(
        sa.String(500), comment="Scryfall image_uris.art_crop (front face of a multi-face card)")
    art_phash_url: Mapped[str | None] = mapped_column(
        sa.String(500), comment="the URL art_phash was computed from; NULL when from a local image")

    expansion: Mapped[Expansion] = relationship(back_populates="printings")
