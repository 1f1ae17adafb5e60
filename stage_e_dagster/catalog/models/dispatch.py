"""Dispatch state: micro-batches, card claims and the backstop sweep's cursor."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at

BATCH_STATUSES = ("pending", "running", "succeeded", "failed", "abandoned")


class MicroBatch(Base):
    """One micro-batch: the Dagster partition key and the card ids behind it."""

    __tablename__ = "micro_batches"
    __table_args__ = (
        sa.CheckConstraint(f"status IN {BATCH_STATUSES}", name="status"),
        sa.Index("ix_micro_batches_status_created", "status", "created_at"),
    )

    batch_key: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    card_ids: Mapped[list[Any]] = mapped_column(sa.JSON)
    trigger_reason: Mapped[str] = mapped_column(sa.String(32))
    attempt: Mapped[int] = mapped_column(sa.Integer, default=1)
    retry_of: Mapped[str | None] = mapped_column(sa.String(64), comment="the batch this one retries")
    status: Mapped[str] = mapped_column(sa.String(16), default="pending")
    run_id: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    failure_reason: Mapped[str | None] = mapped_column(sa.Text)
    peak_rss_mb: Mapped[float | None] = mapped_column(sa.Float, comment="the run worker's true peak")
    created_at: Mapped[created_at]
    finished_at: Mapped[datetime | None]


class CardClaim(Base):
    """A lease: the card belongs to an in-flight batch until ``expires_at``."""

    __tablename__ = "card_claims"

    card_id: Mapped[int] = mapped_column(sa.ForeignKey("cards.id", ondelete="CASCADE"), primary_key=True)
    batch_key: Mapped[str] = mapped_column(sa.String(64), index=True)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class SweepCursor(Base):
    """Where the backstop sweep stands in its lap over the catalogue."""

    __tablename__ = "sweep_cursors"

    name: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    position: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    lap: Mapped[int] = mapped_column(sa.Integer, default=0)
    found_this_lap: Mapped[int] = mapped_column(sa.Integer, default=0)
    updated_at: Mapped[datetime | None]
