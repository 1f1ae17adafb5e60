"""Dispatch state: micro-batches, card claims, the backstop sweep's cursor, the manifest rollout and
what this project did to the dispatch pool."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at

# ``stopped``: the run finished, but a trip stopped its Stage C before every card (see ``cards_done``).
BATCH_STATUSES = ("pending", "running", "succeeded", "stopped", "failed", "abandoned")
# The claims' batch key of cards parked after their last attempt: out of every batch until the claim
# expires, or an acknowledgement of a failure trip gives them back (``catalog.give_back``).
PARKED_KEY = "parked"


class MicroBatch(Base):
    """One micro-batch: the Dagster partition key and the card ids behind it."""

    __tablename__ = "micro_batches"
    __table_args__ = (
        sa.CheckConstraint(f"status IN {BATCH_STATUSES}", name="status"),
        sa.Index("ix_micro_batches_status_created", "status", "created_at"),
        sa.Index("ix_micro_batches_status_finished", "status", "finished_at"),
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
    started_at: Mapped[datetime | None] = mapped_column(comment="when one run took the batch (pending -> running)")
    lease_expires_at: Mapped[datetime | None] = mapped_column(
        comment="renewed while the batch waits or runs; a batch is lost only once this passes with no run going"
    )
    requested_at: Mapped[datetime | None] = mapped_column(
        comment="when a run was last requested for the batch; NULL: a retry nobody requested yet"
    )
    request_count: Mapped[int] = mapped_column(
        sa.Integer, default=0, server_default="0", comment="run requests made; each needs its own run key"
    )
    backfill_id: Mapped[str | None] = mapped_column(sa.String(32), comment="the sweep backfill that owns attempt 1")
    progress_at: Mapped[datetime | None] = mapped_column(
        comment="the holding run's last card boundary: its worker is alive"
    )
    cards_done: Mapped[int | None] = mapped_column(
        sa.Integer, comment="cards Stage C finished (evidence written or already current); NULL before Stage C ends"
    )
    stopped_by_trip: Mapped[str | None] = mapped_column(
        sa.String(48), comment="the trip that stopped Stage C before every card; NULL when it went through"
    )
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


class ManifestRollout(Base):
    """How far the running code's extractor manifest has been applied to stored evidence.

    ``manifest`` is the fingerprint being rolled out; ``position`` the last evidence id walked.
    ``completed_at`` is set once a full walk found every stale card and put it back in the backlog.
    """

    __tablename__ = "manifest_rollouts"

    name: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    manifest: Mapped[str] = mapped_column(sa.String(64))
    position: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    requeued: Mapped[int] = mapped_column(sa.Integer, default=0, comment="cards put back in the backlog so far")
    started_at: Mapped[created_at]
    completed_at: Mapped[datetime | None]


class PoolControl(Base):
    """What this project did to a Dagster pool's limit, so it never undoes what an operator did.

    ``applied_limit`` is the limit last set from ``STAGE_E_MAX_CONCURRENT_DISPATCHES``: the setting is
    applied again only while the pool still has that limit. ``held_at`` marks a hold (limit 0) this
    project applied during a trip, and ``held_from`` the limit to give back when it ends.
    """

    __tablename__ = "pool_controls"

    pool: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    applied_limit: Mapped[int | None] = mapped_column(sa.Integer)
    held_at: Mapped[datetime | None]
    held_from: Mapped[int | None] = mapped_column(sa.Integer, comment="the limit before the hold; NULL: none")
    trip_id: Mapped[str | None] = mapped_column(sa.String(48))
    governed_limit: Mapped[int | None] = mapped_column(
        sa.Integer, comment="dispatch concurrency the host-load governor allows now (1 .. the cap)"
    )
    over_hard_since: Mapped[datetime | None] = mapped_column(
        comment="since when load has stayed over the hard bar with the governor at its floor"
    )
    governed_at: Mapped[datetime | None] = mapped_column(comment="the governor's last decision")
