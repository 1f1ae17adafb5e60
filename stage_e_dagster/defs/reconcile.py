"""Keeping the batches in flight honest: renew what waits or runs, settle what ended, request what needs it.

This is the one place a batch is requested again (only ``card_created_sensor`` calls it; run-key
dedup is per sensor). It reads Dagster's facts (the batch's runs, its sweep's backfill) and calls the
one transition ``dispatch.lifecycle.next_step`` names; an attempt is spent only by a run that took
the batch and then failed or vanished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from dagster import AssetObservation, DagsterInstance, DagsterRun, RunsFilter

from ..catalog.engine import session_scope
from ..catalog.models import MicroBatch
from ..dispatch.batches import lease_renewal_due, renew_lease, request_again
from ..dispatch.lifecycle import EXPIRE, RENEW, REQUEST, REQUEST_GRACE, backfill_to_rejoin, expire_lease, next_step
from ..settings import Settings
from .dagster_internals import backfill_is_requested
from .dagster_internals import runs as dagster_runs
from .run_ends import ENDED, settle_run_end
from .run_queue import ACTIVE_STATUSES
from .tags import PARTITION_TAG
from .unstarted import fail_unstarted_runs

# Batches looked at per tick: every running one (few: the pool caps them) and the pending ones that
# need a request or whose lease is half spent, oldest lease first.
RECONCILE_LIMIT = 100


@dataclass
class Reconciled:
    """What a pass found. ``due`` holds the batches to request, as read and not yet marked: the tick
    marks (``request_due``) only as many as it emits, once it knows it emits any. ``backfills``: the
    sweep backfill each of them is requested in (``dispatch.lifecycle.backfill_to_rejoin``), by key."""

    due: list[MicroBatch] = field(default_factory=list)
    backfills: dict[str, str] = field(default_factory=dict)
    observations: list[AssetObservation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _due_batches(engine: sa.Engine, settings: Settings, now: datetime) -> list[MicroBatch]:
    half = now + timedelta(seconds=settings.claim_ttl_s / 2)
    with session_scope(engine) as session:
        running = session.execute(
            sa.select(MicroBatch).where(MicroBatch.status == "running").limit(RECONCILE_LIMIT)
        ).scalars()
        pending = session.execute(
            sa.select(MicroBatch)
            .where(
                MicroBatch.status == "pending",
                sa.or_(
                    MicroBatch.requested_at.is_(None),
                    MicroBatch.requested_at < now - REQUEST_GRACE,
                    MicroBatch.lease_expires_at < half,
                ),
            )
            .order_by(MicroBatch.lease_expires_at)
            .limit(RECONCILE_LIMIT)
        ).scalars()
        return [*running, *pending]


def _runs_by_batch(instance: DagsterInstance, keys: list[str]) -> dict[str, list[DagsterRun]]:
    runs: dict[str, list[DagsterRun]] = {key: [] for key in keys}
    if keys:
        for run in dagster_runs(instance, RunsFilter(tags={PARTITION_TAG: keys})):
            runs.setdefault(run.tags.get(PARTITION_TAG, ""), []).append(run)
    return runs


def _backfill_launching(instance: DagsterInstance, backfill_id: str, seen: dict[str, bool]) -> bool:
    """Whether the sweep's backfill may still launch runs (read once per tick per backfill)."""
    if backfill_id not in seen:
        seen[backfill_id] = backfill_is_requested(instance, backfill_id)
    return seen[backfill_id]


def reconcile(instance: DagsterInstance, engine: sa.Engine, settings: Settings, *, now: datetime) -> Reconciled:
    """One bounded pass over the batches in flight: renew, settle; returns the batches due a request."""
    done = Reconciled()
    # First, so a run Dagster never started past the bound reads as ended (failed) below, not as going.
    done.notes += fail_unstarted_runs(instance, now=now)
    batches = _due_batches(engine, settings, now)
    runs = _runs_by_batch(instance, [b.batch_key for b in batches])
    backfills: dict[str, bool] = {}
    lease = now + timedelta(seconds=settings.claim_ttl_s)
    for batch in batches:
        its_runs = runs.get(batch.batch_key, [])
        going = any(run.status in ACTIVE_STATUSES for run in its_runs)
        ended = [run for run in its_runs if run.status in ENDED]
        if not going and _settle_ended(engine, instance, settings, ended, done):
            continue
        launching = lambda: _backfill_launching(instance, batch.backfill_id, backfills)  # noqa: E731
        step = next_step(batch, run_going=going, run_ended=bool(ended), now=now, backfill_launching=launching)
        if step == RENEW:
            _renew(engine, batch, until=lease, now=now)
        elif step == EXPIRE:
            with session_scope(engine) as session:
                lost = expire_lease(session, batch.batch_key, now=now, max_attempts=settings.max_batch_attempts,
                                    claim_ttl_s=settings.claim_ttl_s)
            if lost.recorded:
                done.notes.append(f"{batch.batch_key}: lease expired with no run going")
                _request_retry(engine, lost.retry.batch_key if lost.retry else None, done)
        elif step == REQUEST:
            done.due.append(batch)
            rejoin = backfill_to_rejoin(batch, backfill_launching=launching)
            if rejoin is not None:
                done.backfills[batch.batch_key] = rejoin
    return done


def _settle_ended(
    engine: sa.Engine, instance: DagsterInstance, settings: Settings, ended: list[DagsterRun], done: Reconciled
) -> bool:
    """Settle the batch's ended runs (a run end the envelope sensor missed); whether one moved the batch."""
    settled = False
    for run in ended:
        end = settle_run_end(engine, instance, settings, run)
        settled = settled or end.recorded
        if end.note:
            done.notes.append(end.note)
        _request_retry(engine, end.retry_key, done)
    return settled


def _renew(engine: sa.Engine, batch: MicroBatch, *, until: datetime, now: datetime) -> None:
    """Renew the batch's lease if it is due as read; most ticks of a drain open no write transaction."""
    if lease_renewal_due(batch, until=until, now=now):
        with session_scope(engine) as session:
            renew_lease(session, batch.batch_key, until=until, now=now)


def _request_retry(engine: sa.Engine, retry_key: str | None, done: Reconciled) -> None:
    """A retry made while reconciling is due a request in the same tick."""
    if retry_key is not None:
        with session_scope(engine) as session:
            seen = session.get(MicroBatch, retry_key)
        if seen is not None:
            done.due.append(seen)


def request_due(
    engine: sa.Engine, settings: Settings, due: list[MicroBatch], *, now: datetime, limit: int
) -> list[MicroBatch]:
    """Mark requested, in order, up to ``limit`` of the batches due: the ones the tick is about to emit.
    Each is a compare-and-set on the row as read; another evaluator that requested it first wins it."""
    requested: list[MicroBatch] = []
    for seen in due:
        if len(requested) >= limit:
            break
        with session_scope(engine) as session:
            again = request_again(session, seen, now=now, claim_ttl_s=settings.claim_ttl_s)
        if again is not None:
            requested.append(again)
    return requested
