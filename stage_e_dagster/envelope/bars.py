"""The bars: ceilings, and the rule that names the first one a set of signals crosses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings import Settings

# Priority order: the first breach in this order names the trip.
BAR_ORDER = ("fetch_lockout", "host_load", "rss", "fetch_failure_rate")


@dataclass(frozen=True)
class EnvelopeSignals:
    """One sample of what the envelope watches. ``None`` means the signal is missing: its bar is skipped."""

    host_load: float | None = None
    rss_mb: float | None = None
    fetch_failures: int | None = None
    fetch_total: int | None = None
    lockout_seen: bool | None = None


@dataclass(frozen=True)
class Ceilings:
    host_load: float
    rss_mb: float
    fetch_failure_rate: float
    fetch_failure_window: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "Ceilings":
        return cls(
            host_load=settings.host_load_ceiling,
            rss_mb=settings.rss_mb_ceiling,
            fetch_failure_rate=settings.fetch_failure_rate_ceiling,
            fetch_failure_window=settings.fetch_failure_window,
        )

    @property
    def max_fetch_failures(self) -> float:
        """Failures allowed in a full window; one more trips (0.01 x 500 = 5, so the 6th trips)."""
        return self.fetch_failure_rate * self.fetch_failure_window


@dataclass(frozen=True)
class Breach:
    bar: str
    observed: float
    ceiling: float

    def detail(self, signals: EnvelopeSignals) -> dict[str, Any]:
        return {
            "observed": self.observed,
            "ceiling": self.ceiling,
            "signals": {
                "host_load": signals.host_load,
                "rss_mb": signals.rss_mb,
                "fetch_failures": signals.fetch_failures,
                "fetch_total": signals.fetch_total,
                "lockout_seen": signals.lockout_seen,
            },
        }


def first_breach(signals: EnvelopeSignals, ceilings: Ceilings) -> Breach | None:
    """The first bar, in priority order, that the signals cross strictly; ``None`` when all hold."""
    if signals.lockout_seen:
        return Breach("fetch_lockout", 1.0, 0.0)
    if signals.host_load is not None and signals.host_load > ceilings.host_load:
        return Breach("host_load", signals.host_load, ceilings.host_load)
    if signals.rss_mb is not None and signals.rss_mb > ceilings.rss_mb:
        return Breach("rss", signals.rss_mb, ceilings.rss_mb)
    if signals.fetch_failures is not None and signals.fetch_failures > ceilings.max_fetch_failures:
        return Breach("fetch_failure_rate", float(signals.fetch_failures), ceilings.max_fetch_failures)
    return None
