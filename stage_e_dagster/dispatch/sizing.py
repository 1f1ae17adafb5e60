"""The one place micro-batches are sized.

Today a batch is a fixed count of cards and a tick fills the free dispatch slots. A Dagster run
costs seconds of start-up while Stage C on a local image takes tens of milliseconds, so a later
version can size by expected work here without touching the sensors or the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import Settings

# A tick never creates more batches than this, whatever the free concurrency: the sensor tick budget
# is 60 s and each batch is a committed row plus a partition.
MAX_BATCHES_PER_TICK = 8


@dataclass(frozen=True)
class BatchPlan:
    batch_size: int
    max_batches: int


def plan_for_tick(settings: Settings, *, in_flight_runs: int, cap: int | None = None) -> BatchPlan:
    """Batches for one sensor tick: enough to fill the free dispatch slots, never more.

    ``cap`` is the dispatch pool's limit as it stands (an operator may have set their own); the
    setting when unknown."""
    limit = settings.max_concurrent_dispatches if cap is None else cap
    free = max(0, limit - in_flight_runs)
    return BatchPlan(batch_size=settings.micro_batch_size, max_batches=min(free, MAX_BATCHES_PER_TICK))


def plan_for_sweep(settings: Settings, *, max_batches: int) -> BatchPlan:
    """Batches for one backstop sweep: the pool, not the sweep, caps how many run at once."""
    return BatchPlan(batch_size=settings.micro_batch_size, max_batches=max_batches)
