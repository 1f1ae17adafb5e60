"""The bars: ceilings, and the rule that names the first one a set of signals crosses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings import Settings

# Priority order: the first breach in this order names the trip.
BAR_ORDER = ("fetch_lockout", "host_load", "rss", "fetch_failure_rate", "failed_batches", "extractor_errors")
# The bars of failures that must not hide: acknowledging one of their trips gives back the cards those
# failures set aside (``catalog.give_back``).
FAILURE_BARS = ("failed_batches", "extractor_errors")


@dataclass(frozen=True)
class EnvelopeSignals:
    """One sample of what the envelope watches. ``None`` means the signal is missing: its bar is skipped."""

    host_load: float | None = None
    rss_mb: float | None = None
    fetch_failures: int | None = None
    fetch_total: int | None = None
    lockout_seen: bool | None = None
    failed_batches: int | None = None  # the newest batches to finish, failed in a row for one cause
    failure_cause: str | None = None  # that cause: the newest one's failure reason
    extractor_errors: int | None = None  # cards read whose extractor raised, in the extractor window
    extractor_read: int | None = None  # cards read in that window
    extractor_error_cause: str | None = None  # the commonest of those errors: which extractor, what it raised


@dataclass(frozen=True)
class Ceilings:
    host_load: float
    rss_mb: float
    fetch_failure_rate: float
    fetch_failure_window: int
    failed_batches: int = 2
    extractor_error_rate: float = 0.05
    extractor_error_window: int = 100

    @classmethod
    def from_settings(cls, settings: Settings) -> "Ceilings":
        return cls(
            host_load=settings.host_load_ceiling,
            rss_mb=settings.rss_mb_ceiling,
            fetch_failure_rate=settings.fetch_failure_rate_ceiling,
            fetch_failure_window=settings.fetch_failure_window,
            failed_batches=settings.failed_batches_ceiling,
            extractor_error_rate=settings.extractor_error_rate_ceiling,
            extractor_error_window=settings.extractor_error_window,
        )

    @property
    def max_fetch_failures(self) -> float:
        """Failures allowed in a full window; one more trips (0.01 x 500 = 5, so the 6th trips)."""
        return self.fetch_failure_rate * self.fetch_failure_window

    @property
    def max_extractor_errors(self) -> float:
        """Cards with an extractor error allowed in a full window; one more trips (0.05 x 100: the 6th)."""
        return self.extractor_error_rate * self.extractor_error_window


@dataclass(frozen=True)
class Breach:
    bar: str
    observed: float
    ceiling: float
    cause: str | None = None  # what failed, for the bars of failures: the operator's first lead

    def detail(self, signals: EnvelopeSignals) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "observed": self.observed,
            "ceiling": self.ceiling,
            "signals": {
                "host_load": signals.host_load,
                "rss_mb": signals.rss_mb,
                "fetch_failures": signals.fetch_failures,
                "fetch_total": signals.fetch_total,
                "lockout_seen": signals.lockout_seen,
                "failed_batches": signals.failed_batches,
                "extractor_errors": signals.extractor_errors,
                "extractor_read": signals.extractor_read,
            },
        }
        if self.cause is not None:
            detail["cause"] = self.cause
        return detail


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
    if signals.failed_batches is not None and signals.failed_batches > ceilings.failed_batches:
        return Breach("failed_batches", float(signals.failed_batches), float(ceilings.failed_batches),
                      signals.failure_cause or "unknown")
    if signals.extractor_errors is not None and signals.extractor_errors > ceilings.max_extractor_errors:
        return Breach("extractor_errors", float(signals.extractor_errors), ceilings.max_extractor_errors,
                      signals.extractor_error_cause or "unknown")
    return None
