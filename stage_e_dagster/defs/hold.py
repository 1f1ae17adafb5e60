"""Holding dispatch while a trip is open, and releasing it after the acknowledgement.

Dagster has no instance-wide pause, so a hold is three things: sensors skip, the dispatch pool's
limit drops to 0 (queued runs stay queued), and queued dispatch runs are cancelled with their
batches abandoned, which puts their cards back in the backlog for after the acknowledgement.
"""

from __future__ import annotations

import sqlalchemy as sa
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.models import MicroBatch
from ..dispatch.batches import IN_FLIGHT, abandon
from ..settings import Settings
from .tags import DISPATCH_POOL, DISPATCH_TAG, PARTITION_TAG

ACTIVE_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def pool_limit(instance: DagsterInstance) -> int | None:
    info = instance.event_log_storage.get_concurrency_info(DISPATCH_POOL)
    return info.slot_count


def set_pool_limit(instance: DagsterInstance, limit: int) -> None:
    if pool_limit(instance) != limit:
        instance.event_log_storage.set_concurrency_slots(DISPATCH_POOL, limit)


def in_flight_dispatch_runs(instance: DagsterInstance) -> int:
    return instance.get_runs_count(RunsFilter(tags={DISPATCH_TAG: "micro-batch"}, statuses=ACTIVE_STATUSES))


def hold_dispatch(instance: DagsterInstance, engine: sa.Engine, *, reason: str) -> int:
    """Pool to 0 and cancel every queued dispatch run; returns how many runs were cancelled."""
    set_pool_limit(instance, 0)
    queued = instance.get_runs(RunsFilter(tags={DISPATCH_TAG: "micro-batch"}, statuses=[DagsterRunStatus.QUEUED]))
    keys = []
    for run in queued:
        instance.run_coordinator.cancel_run(run.run_id)
        if run.tags.get(PARTITION_TAG):
            keys.append(run.tags[PARTITION_TAG])
    if keys:
        with session_scope(engine) as session:
            for batch in session.execute(
                sa.select(MicroBatch).where(MicroBatch.batch_key.in_(keys), MicroBatch.status.in_(IN_FLIGHT))
            ).scalars():
                abandon(session, batch, reason=f"queued run cancelled: {reason}", now=utcnow())
    return len(queued)


def release_hold(instance: DagsterInstance, settings: Settings) -> None:
    """Restore the pool to the configured cap (a no-op when it already is)."""
    set_pool_limit(instance, settings.max_concurrent_dispatches)
