"""The contention governor: steer dispatch concurrency by CPU contention, and trip only when steering failed.

One sample per decision: below the soft bar, one more concurrent dispatch (up to the cap); between
the soft and the hard bar, hold; above the hard bar, halve (floor 1). Only at the floor and over the
hard bar for a sustained period does the load bar trip, and a gap in sampling longer than that
period starts it over: a reading after a quiet hour says nothing about the hour. The original
system learned this the hard way: one-sample trips on a busy neighbour, then a soft brake, then
this additive-increase, multiplicative-decrease rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..settings import Settings
from .signals import CPU_PRESSURE

SIGNAL_LABELS = {CPU_PRESSURE: "cpu pressure", "excess_load": "load beyond our runs"}


@dataclass(frozen=True)
class Bars:
    soft: float
    hard: float
    cap: int
    trip_after_s: float
    label: str = "load"

    @classmethod
    def for_signal(cls, settings: Settings, signal: str, cap: int) -> "Bars":
        """The bars of the signal read: percent for CPU pressure, CPUs of load for the fallback."""
        if signal == CPU_PRESSURE:
            soft, hard = settings.cpu_pressure_soft_bar, settings.cpu_pressure_ceiling
        else:
            soft, hard = settings.host_load_soft_bar, settings.host_load_ceiling
        return cls(soft, hard, cap, settings.host_load_trip_after_s, SIGNAL_LABELS.get(signal, signal))


@dataclass(frozen=True)
class Governed:
    """One decision: the concurrency allowed now, since when contention has been over at the floor, and why."""

    limit: int
    over_hard_since: datetime | None
    trip: bool
    reason: str


def govern(
    load: float,
    bars: Bars,
    *,
    current: int | None,
    over_hard_since: datetime | None,
    now: datetime,
    sampled_at: datetime | None = None,
) -> Governed:
    """The next governed concurrency from one contention sample and the previous decision (made at ``sampled_at``)."""
    limit = bars.cap if current is None else max(1, min(current, bars.cap))
    name = bars.label
    if load > bars.hard:
        if limit > 1:
            halved = max(1, limit // 2)
            return Governed(
                halved, None, False, f"{name} {load:.2f} > hard bar {bars.hard:g}: concurrency {limit} -> {halved}"
            )
        gap = sampled_at is not None and now - sampled_at > timedelta(seconds=bars.trip_after_s)
        since = now if over_hard_since is None or gap else over_hard_since
        held = (now - since).total_seconds()
        trip = now - since >= timedelta(seconds=bars.trip_after_s)
        return Governed(
            1,
            since,
            trip,
            f"{name} {load:.2f} > hard bar {bars.hard:g} at the floor for {held:.0f} s"
            + (f" (trips at {bars.trip_after_s:g} s)" if not trip else ": steering failed"),
        )
    if load < bars.soft and limit < bars.cap:
        return Governed(
            limit + 1, None, False, f"{name} {load:.2f} < soft bar {bars.soft:g}: concurrency {limit} -> {limit + 1}"
        )
    if load < bars.soft:
        return Governed(limit, None, False, f"{name} {load:.2f} < soft bar {bars.soft:g}: at the cap {limit}")
    between = f"{name} {load:.2f} between the bars {bars.soft:g}-{bars.hard:g}"
    return Governed(limit, None, False, f"{between}: concurrency held at {limit}")
