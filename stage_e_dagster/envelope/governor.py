"""The host-load governor: steer dispatch concurrency by load, and trip only when steering failed.

One sample per decision: below the soft bar, one more concurrent dispatch (up to the cap); between
the soft and the hard bar, hold; above the hard bar, halve (floor 1). Only at the floor and over the
hard bar for a sustained period does the load bar trip. The original system learned this the hard
way: one-sample trips on a busy neighbour, then a soft brake, then this additive-increase,
multiplicative-decrease rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Bars:
    soft: float
    hard: float
    cap: int
    trip_after_s: float


@dataclass(frozen=True)
class Governed:
    """One decision: the concurrency allowed now, since when load has been over at the floor, and why."""

    limit: int
    over_hard_since: datetime | None
    trip: bool
    reason: str


def govern(
    load: float, bars: Bars, *, current: int | None, over_hard_since: datetime | None, now: datetime
) -> Governed:
    """The next governed concurrency from one load sample and the previous decision."""
    limit = bars.cap if current is None else max(1, min(current, bars.cap))
    if load > bars.hard:
        if limit > 1:
            halved = max(1, limit // 2)
            return Governed(
                halved, None, False, f"load {load:.2f} > hard bar {bars.hard:g}: concurrency {limit} -> {halved}"
            )
        since = over_hard_since or now
        held = (now - since).total_seconds()
        trip = now - since >= timedelta(seconds=bars.trip_after_s)
        return Governed(
            1,
            since,
            trip,
            f"load {load:.2f} > hard bar {bars.hard:g} at the floor for {held:.0f} s"
            + (f" (trips at {bars.trip_after_s:g} s)" if not trip else ": steering failed"),
        )
    if load < bars.soft and limit < bars.cap:
        return Governed(
            limit + 1, None, False, f"load {load:.2f} < soft bar {bars.soft:g}: concurrency {limit} -> {limit + 1}"
        )
    if load < bars.soft:
        return Governed(limit, None, False, f"load {load:.2f} < soft bar {bars.soft:g}: concurrency at the cap {limit}")
    return Governed(
        limit, None, False, f"load {load:.2f} between the bars {bars.soft:g}-{bars.hard:g}: concurrency held at {limit}"
    )
