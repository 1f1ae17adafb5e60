"""What Dagster's run queue holds for dispatch, read here and nowhere else: the dispatch runs queued or
going, the dispatch pool's own limit, and the run queue's own caps (``max_concurrent_runs``, and its tag
limit on dispatch runs).

Reads only; what they allow is decided in ``dispatch/slots.py``, and what this project sets the pool to
(the hold, the release, the governed concurrency) is ``defs/hold.py``'s.
"""

from __future__ import annotations

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from ..dispatch.slots import RunQueue, cap_within_run_queue
from . import dagster_internals
from .tags import DISPATCH_POOL, DISPATCH_TAG, PARTITION_TAG

# Queued or going: every status Dagster counts as not finished (a canceling run still holds its slot
# and may still be writing).
ACTIVE_STATUSES = dagster_internals.NOT_FINISHED_STATUSES
# Runs with a worker (or getting one): Dagster's own grouping.
RUNNING = dagster_internals.ACTIVE_RUN_STATUSES


def is_dispatch_run(run: DagsterRun) -> bool:
    return run.tags.get(DISPATCH_TAG) == "micro-batch"


def active_dispatch_runs(instance: DagsterInstance, statuses: list[DagsterRunStatus] | None = None) -> list[DagsterRun]:
    """Dispatch runs queued or going. Filtered by status (an indexed column, and few runs are active),
    then by tag in Python: a tag every dispatch run carries would make the query read all history."""
    runs = dagster_internals.runs(instance, RunsFilter(statuses=statuses or ACTIVE_STATUSES))
    return [run for run in runs if is_dispatch_run(run)]


def pool_limit(instance: DagsterInstance) -> int | None:
    """The dispatch pool's own limit; ``None`` while it has none and the instance's ``default_limit`` applies."""
    return dagster_internals.pool_limit(instance, DISPATCH_POOL)


def read_run_queue(instance: DagsterInstance) -> RunQueue:
    """The dispatch runs queued or going, how many of them are running, and the pool's own limit: one read
    of the runs, one of the pool."""
    active = active_dispatch_runs(instance)
    return RunQueue(
        going=len(active),
        running=sum(1 for run in active if run.status in RUNNING),
        pool_limit=pool_limit(instance),
    )


def dispatch_run_limit(instance: DagsterInstance) -> int | None:
    """The run queue's own limit on dispatch runs: its tag limit on ``dagster/partition``, which every run of
    a ``micro_batches`` partition carries however launched. Unlike the pool's, it holds on a pass that finds
    the pool's limit row missing; ``None`` on an instance without it."""
    return dagster_internals.run_tag_limit(instance, PARTITION_TAG)


def dispatch_cap(instance: DagsterInstance, cap: int) -> int:
    """``cap`` (``STAGE_E_MAX_CONCURRENT_DISPATCHES``) within the run queue's ``max_concurrent_runs``, the
    acknowledge job's room left free, and within its limit on dispatch runs
    (``dispatch.slots.cap_within_run_queue``)."""
    return cap_within_run_queue(cap, dagster_internals.run_queue_limit(instance), dispatch_run_limit(instance))
