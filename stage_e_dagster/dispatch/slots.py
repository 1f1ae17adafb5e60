"""How many dispatch runs a tick may have queued or going, decided from the run queue's facts.

The Dagster layer reads the facts (``defs/run_queue.py``: the dispatch runs queued or going, the pool's
own limit, the run queue's ``max_concurrent_runs``) and hands them here as plain numbers; what they
allow is decided here, with nothing of Dagster imported.
"""

from __future__ import annotations

from dataclasses import dataclass

# Runs of the run queue's own cap (``max_concurrent_runs``) kept free of dispatch: the acknowledge job a
# person launches during a trip.
ACK_ROOM = 1


@dataclass(frozen=True)
class RunQueue:
    """The run queue as one reading saw it. ``going`` counts the dispatch runs queued or going (every
    status Dagster counts as not finished), ``running`` those of them with a worker, and ``pool_limit``
    is the dispatch pool's own limit, ``None`` while it has none and the instance's default applies."""

    going: int
    running: int
    pool_limit: int | None


@dataclass(frozen=True)
class Slots:
    """The dispatch runs the queue may hold now: ``cap`` is the governed concurrency, or the pool's own
    limit where that is lower; ``queue_ahead`` says the pool's limit is that cap, so runs queued beyond it
    wait in Dagster's queue for a slot; ``in_flight`` counts the dispatch runs queued or going."""

    cap: int
    queue_ahead: bool
    in_flight: int

    def free(self, requested: int) -> bool:
        """Whether a slot is still free once the ``requested`` batches this tick requests are counted."""
        return self.in_flight + requested < self.cap

    def full_reason(self) -> str:
        """The skip reason of a tick that found every slot taken."""
        return f"{self.in_flight} dispatch run(s) queued or going, the most for a limit of {self.cap}" + (
            " (one queued behind each running)" if self.queue_ahead else ""
        )


def cap_within_run_queue(cap: int, run_queue_limit: int | None, dispatch_run_limit: int | None = None) -> int:
    """``cap`` (``STAGE_E_MAX_CONCURRENT_DISPATCHES``), at most the run queue's ``max_concurrent_runs``
    (``None``: unlimited) less the acknowledge job's room, so dispatch never fills the queue's cap and the
    ack job always starts; and at most the queue's own limit on dispatch runs (the ``dagster/partition``
    tag limit), past which runs a tick requests would only wait."""
    within = cap if run_queue_limit is None else min(cap, run_queue_limit - ACK_ROOM)
    if dispatch_run_limit is not None:
        within = min(within, dispatch_run_limit)
    return max(1, within)


def slots_under(governed: int, queue: RunQueue) -> Slots:
    """The slots under the governed concurrency and the pool's own limit. Runs queued beyond the pool's
    limit wait for a slot only while the pool is the limit: under a governed limit below an operator's
    own pool limit, the sensor alone keeps the count."""
    pool = queue.pool_limit
    cap = governed if pool is None else min(pool, governed)
    return Slots(cap=cap, queue_ahead=pool is not None and cap == pool, in_flight=queue.going)
