"""The dispatch pool: holding it while a trip is open, giving it back after the acknowledgement, and
applying ``STAGE_E_MAX_CONCURRENT_DISPATCHES`` without undoing an operator's own limit.

Dagster has no instance-wide pause, so a hold is three things: sensors skip, the dispatch pool's
limit drops to 0 (queued runs stay queued), and queued dispatch runs a sensor requested are cancelled
with their batches abandoned, which puts their cards back in the backlog for after the acknowledgement.
What this project did to the pool is recorded in the catalogue (``pool_controls``), and only that
is ever undone: a limit set with ``dagster instance concurrency set`` stays. The hold row is
committed before the pool is touched and cleared only after the pool has its limit back, so a call
to the instance that fails (a locked SQLite file, a PostgreSQL blip, a killed process) leaves the
row, and the next tick finishes the job: every 0 this project sets has a row that gives it back.

The pool's limit row is never deleted, only set: Dagster's dequeue pass reads the pools that have a
row before it creates a missing one at ``default_limit``, so the pass that finds it missing ignores
the pool. On that pass only the run queue's own tag limit on dispatch runs (``dagster/partition`` at
the cap, in the shipped instance files) keeps them at the cap.

Which dispatch runs are going and what the pool's limit is are read in ``defs/run_queue.py``.
"""

from __future__ import annotations

import sqlalchemy as sa
from dagster import DagsterInstance, DagsterRunStatus

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.models import EnvelopeTrip, PoolControl
from ..dispatch.batches import abandon
from ..dispatch.steering import pool_control, standing_concurrency
from . import dagster_internals
from .run_queue import active_dispatch_runs, pool_limit
from .tags import BACKFILL_TAG, DISPATCH_POOL, PARTITION_TAG


def _set_pool_limit(instance: DagsterInstance, limit: int) -> None:
    if pool_limit(instance) != limit:
        dagster_internals.set_pool_limit(instance, DISPATCH_POOL, limit)


def hold_dispatch(instance: DagsterInstance, engine: sa.Engine, *, trip_id: str, reason: str) -> int:
    """Pool to 0 (remembering the limit it had) and cancel every queued dispatch run a sensor requested
    (a sweep's wait, queued, for the acknowledgement); returns how many runs were cancelled. Taking
    the hold is a compare-and-set on the catalogue row."""
    # The hold row is committed before the pool is touched: a process that dies after the pool write
    # leaves a hold the next tick finishes and the ack gives back, never a 0 with no row, which the
    # next hold would record as the limit to restore and the setting would keep as an operator's.
    with session_scope(engine) as session:
        control = pool_control(session, DISPATCH_POOL)
        if control.held_at is None:
            control.held_at, control.held_from = utcnow(), pool_limit(instance)
        # The newest trip: a release clears the hold only once this one is acknowledged.
        control.trip_id = trip_id
    with session_scope(engine) as session:
        control = pool_control(session, DISPATCH_POOL)
        # The pool goes to 0 only while the row is locked and still held: a release running beside this
        # tick (sensors tick in threads, or two daemons) either finishes before, and this tick leaves the
        # pool alone, or starts after and gives the limit back.
        if control.held_at is not None:
            _set_pool_limit(instance, 0)
    # A sweep's queued runs wait behind the pool instead: a cancelled backfill run fails its partition
    # for good, so the backfill would read COMPLETED_FAILED although the sensors finish its cards later.
    queued = [run for run in active_dispatch_runs(instance, [DagsterRunStatus.QUEUED])
              if BACKFILL_TAG not in run.tags]
    for run in queued:
        dagster_internals.cancel_queued_run(instance, run.run_id)
        key = run.tags.get(PARTITION_TAG)
        if key:
            with session_scope(engine) as session:
                abandon(session, key, reason=f"queued run cancelled: {reason}", now=utcnow())
    return len(queued)


def release_hold(instance: DagsterInstance, engine: sa.Engine, *, cap: int) -> bool:
    """Give the pool back the limit it had before this project's hold, then clear the hold; a no-op
    without a hold or while any trip is open. Returns whether the hold was cleared. A pool that had no
    limit of its own when held gets the governed concurrency (at most ``cap``), never a deleted row.

    Both happen while the control row is locked (``FOR UPDATE``; SQLite's write lock), so a hold taken
    beside it waits and then holds again. The limit goes back first: if that fails, the transaction
    rolls back, the hold row stays and the next tick tries again."""
    with session_scope(engine) as session:
        control = session.get(PoolControl, DISPATCH_POOL, with_for_update=True, populate_existing=True)
        if control is None or control.held_at is None:
            return False
        # Any open trip, not only the one the hold recorded: the check is global.
        if session.execute(sa.select(EnvelopeTrip.id).where(EnvelopeTrip.acknowledged_at.is_(None)).limit(1)).first():
            return False
        restore = control.held_from
        _set_pool_limit(instance, restore if restore is not None else standing_concurrency(control, cap))
        control.held_at = control.held_from = control.trip_id = None
    return True


def apply_pool_setting(instance: DagsterInstance, engine: sa.Engine, cap: int) -> int | None:
    """Set the pool to ``cap`` unless an operator changed it since this project last did; returns the limit."""
    with session_scope(engine) as session:
        control = pool_control(session, DISPATCH_POOL)
        if control.held_at is not None:
            return 0
        current = pool_limit(instance)
        # No limit of its own (a new or reset instance), or still ours: the setting applies.
        if current is None or control.applied_limit is None or (current == control.applied_limit and cap != current):
            _set_pool_limit(instance, cap)
            control.applied_limit = cap
            return cap
        return current
