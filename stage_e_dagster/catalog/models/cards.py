"""Cards: the uploaded images being identified, with the state flags that make backlogs index-backed."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at, intpk, utcnow

CARD_TYPES = ("card", "cardback", "token")
PRINTING_STATUSES = ("unresolved", "resolved", "no_match")


class Card(Base):
    """One uploaded image claiming to show a card by name.

    ``stage_c_pending`` and ``stage_d_pending`` are the backlog flags. Their server defaults
    mean a row inserted by any writer (ORM, bulk insert, raw SQL) is in the Stage C backlog,
    and the partial indexes on them make taking the next batch read O(batch) rows.
    """

    __tablename__ = "cards"
    __table_args__ = (
        sa.CheckConstraint(f"card_type IN {CARD_TYPES}", name="card_type"),
        sa.CheckConstraint(f"printing_status IN {PRINTING_STATUSES}", name="printing_status"),
        sa.Index(
            "ix_cards_stage_c_backlog",
            "id",
            sqlite_where=sa.text("stage_c_pending = 1"),
            postgresql_where=sa.text("stage_c_pending"),
        ),
        sa.Index(
            "ix_cards_stage_d_backlog",
            "id",
            sqlite_where=sa.text("stage_d_pending = 1"),
            postgresql_where=sa.text("stage_d_pending"),
        ),
        sa.Index(
            "ix_cards_config_refused",
            "config_refused_under",
            sqlite_where=sa.text("config_refused_under IS NOT NULL"),
            postgresql_where=sa.text("config_refused_under IS NOT NULL"),
        ),
    )

    id: Mapped[intpk]
    identifier: Mapped[str] = mapped_column(sa.String(200), unique=True, comment="the source's id")
    name: Mapped[str] = mapped_column(sa.String(300))
    image_locator: Mapped[str] = mapped_column(sa.String(2000), comment="file:// or http(s):// URL")
    card_type: Mapped[str] = mapped_column(sa.String(16), default="card", server_default="card")
    dpi: Mapped[int | None] = mapped_column(sa.Integer)
    declared_content_hash: Mapped[str | None] = mapped_column(
        sa.String(64), comment="sha256 hex of the image bytes, when the source states it"
    )
    content_hash: Mapped[str | None] = mapped_column(
        sa.String(80),
        index=True,
        comment="hash of the present image; NULL until known. Writers that change the image reset it",
    )
    printing_status: Mapped[str] = mapped_column(
        sa.String(10), default="unresolved", server_default="unresolved", index=True
    )
    inferred_printing_id: Mapped[int | None] = mapped_column(sa.ForeignKey("printings.id", ondelete="SET NULL"))
    stage_c_pending: Mapped[bool] = mapped_column(
        sa.Boolean,
        default=True,
        server_default=sa.true(),
        comment="no current evidence for the present image",
    )
    stage_d_pending: Mapped[bool] = mapped_column(
        sa.Boolean,
        default=False,
        server_default=sa.false(),
        comment="current evidence is newer than the last Stage D pass",
    )
    evidence_writer: Mapped[str | None] = mapped_column(
        sa.String(80), comment="who last wrote this card's evidence: dispatch:<run>, bulk:<id>, or a person"
    )
    stage_c_attempts: Mapped[int] = mapped_column(
        sa.Integer, default=0, server_default="0", comment="transient fetch failures for the present image"
    )
    next_eligible_at: Mapped[datetime | None] = mapped_column(
        comment="a throttled card (429/503) is not batched again before this time"
    )
    throttle_count: Mapped[int] = mapped_column(
        sa.Integer, default=0, server_default="0", comment="429/503 answers in a row for the present image"
    )
    config_refused_under: Mapped[str | None] = mapped_column(
        sa.String(16),
        comment="refused by the settings: the allow-list fingerprint it was refused under; out of the backlog "
        "until the settings differ",
    )
    config_refused_setting: Mapped[str | None] = mapped_column(
        sa.String(40), comment="the variable whose change would allow the card's locator"
    )
    created_at: Mapped[created_at]
    updated_at: Mapped[datetime | None] = mapped_column(onupdate=utcnow)
