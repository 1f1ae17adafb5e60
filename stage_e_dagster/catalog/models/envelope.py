"""Envelope state shared by every process: trips, the fetch-outcome window and the fetch pacer."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at, intpk

TRIP_BARS = (
    "fetch_lockout", "host_load", "rss", "fetch_failure_rate", "failed_batches", "extractor_errors", "manual"
)
# ``rejected``: the upload's own problem (corrupt, truncated, empty, oversized, missing); not a failure.
FETCH_OUTCOMES = ("ok", "throttled", "failed", "rejected", "lockout")


class EnvelopeTrip(Base):
    """A crossed bar. Open while ``acknowledged_at`` is NULL; only a person's acknowledgement closes it."""

    __tablename__ = "envelope_trips"
    __table_args__ = (
        sa.CheckConstraint(f"bar IN {TRIP_BARS}", name="bar"),
        sa.Index(
            "ix_envelope_trips_open",
            "tripped_at",
            sqlite_where=sa.text("acknowledged_at IS NULL"),
            postgresql_where=sa.text("acknowledged_at IS NULL"),
        ),
        # At most one open trip per automatic bar: two runs meeting the same lockout at once open
        # one trip (the second insert conflicts and reads the first), so one ack resumes.
        sa.Index(
            "uq_envelope_trips_open_bar",
            "bar",
            unique=True,
            sqlite_where=sa.text("acknowledged_at IS NULL AND bar <> 'manual'"),
            postgresql_where=sa.text("acknowledged_at IS NULL AND bar <> 'manual'"),
        ),
    )

    id: Mapped[intpk]
    trip_id: Mapped[str] = mapped_column(sa.String(48), unique=True)
    bar: Mapped[str] = mapped_column(sa.String(32))
    detail: Mapped[dict[str, Any]] = mapped_column(sa.JSON, default=dict)
    run_id: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    tripped_at: Mapped[created_at]
    acknowledged_at: Mapped[datetime | None]
    acknowledged_by: Mapped[str | None] = mapped_column(sa.String(120))
    acknowledged_note: Mapped[str | None] = mapped_column(sa.Text)
    window_floor_id: Mapped[int | None] = mapped_column(
        sa.BigInteger, comment="newest fetch outcome at the ack: outcomes up to it no longer count toward a bar"
    )


class FetchOutcome(Base):
    """One image fetch's outcome. The newest N rows, across all processes, are the failure window."""

    __tablename__ = "fetch_outcomes"
    __table_args__ = (sa.CheckConstraint(f"outcome IN {FETCH_OUTCOMES}", name="outcome"),)

    id: Mapped[intpk]
    outcome: Mapped[str] = mapped_column(sa.String(16))
    status_code: Mapped[int | None] = mapped_column(sa.Integer)
    host: Mapped[str | None] = mapped_column(sa.String(255))
    card_id: Mapped[int | None] = mapped_column(sa.BigInteger)
    run_id: Mapped[str | None] = mapped_column(sa.String(64))
    extractor_error: Mapped[str | None] = mapped_column(
        sa.String(300), comment="the card was read, but an extractor raised: which one, and its error"
    )
    recorded_at: Mapped[created_at]


class FetchPacer(Base):
    """The next free request slot per destination, so N workers never fetch N times as fast."""

    __tablename__ = "fetch_pacer"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    next_slot_at: Mapped[float] = mapped_column(sa.Float, comment="epoch seconds")
    interval_scale: Mapped[float] = mapped_column(sa.Float, default=1.0, comment="backoff multiplier after 429/503")
    last_ok_at: Mapped[float | None] = mapped_column(
        sa.Float, comment="epoch seconds of the destination's last clean answer (to within a second)"
    )
