"""``stage_e_envelope``: the operating envelope as an observed asset the UI plots, one observation per sensor tick.

Nothing materializes it: ``envelope_trip_sensor`` reports what it read each tick as numeric
metadata under fixed keys (zeros included), so the asset page draws every reading against its
ceiling over time. It is an observable source asset, so the UI calls it observed (its latest
observation, not "Never materialized"), and *Observe* in the UI takes one reading at once. Every
read is bounded: backlogs are counted only up to ``BACKLOG_COUNT_BOUND`` through their partial
indexes, the worker's RSS is the newest finished batch's, never a scan.
"""

import warnings
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from dagster import AssetKey, AssetObservation, BetaWarning, MetadataValue, ObserveResult, observable_source_asset
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING, oldest_waiting_since, waiting_on_configuration
from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.heartbeats import concurrent_tickers
from ..catalog.models import EnvelopeTrip, MicroBatch, PoolControl, SensorHeartbeat
from ..dispatch.sizing import waiting_cards
from ..envelope.bars import Ceilings
from ..envelope.fetch_window import window_counts
from ..envelope.signals import CpuPressure, host_load
from ..settings import ALLOWED_HOSTS_SETTING, IMAGE_ROOTS_SETTING, REFUSING_SETTINGS, Settings
from .resources import StageEResource
from .tags import DISPATCH_POOL

ENVELOPE_KEY = AssetKey("stage_e_envelope")
# A backlog count stops here: the figure reads "at least this many" beyond it, and a tick stays
# O(bound) on a catalogue of millions.
BACKLOG_COUNT_BOUND = 10_000

# What each observation key means, with its unit; shown on the asset's page.
READINGS = {
    "cpu_pressure": "CPU pressure (PSI some avg10, percent of 10 s a runnable task waited); 0 without PSI",
    "cpu_pressure_ceiling": "hard bar for cpu_pressure: above it the governor halves; a trip needs it sustained at 1",
    "cpu_pressure_soft_bar": "below it the governor raises dispatch concurrency (where PSI is read)",
    "host_load": "1-minute load average in this process's CPUs (code server host)",
    "host_load_ceiling": "without PSI, the hard bar for host_load less our own running dispatch runs",
    "host_load_soft_bar": "without PSI, below it the governor raises dispatch concurrency",
    "worker_rss_mb": "peak RSS (MB) of the run worker of the newest succeeded batch; 0 before any",
    "rss_mb_ceiling": "bar for worker_rss_mb (MB)",
    "fetch_failures_in_window": "host fetch failures among the newest outcomes since the last ack",
    "fetch_outcomes_in_window": "fetch outcomes counted in that window (at most fetch_failure_window)",
    "fetch_failure_window": "outcomes the failure window holds",
    "fetch_failure_rate": "fetch_failures_in_window / fetch_failure_window",
    "fetch_failure_rate_ceiling": "bar for fetch_failure_rate (a trip when strictly above)",
    "fetch_lockout_open": "1 while a fetch_lockout trip (HTTP 403) is open, else 0",
    "fetch_lockout_ceiling": "bar for fetch_lockout_open: any lockout trips",
    "open_trips": "unacknowledged trips (any bar); dispatch is halted while above 0",
    "governed_concurrency": "dispatch runs the contention governor allows now (pool_controls)",
    "max_concurrent_dispatches": "STAGE_E_MAX_CONCURRENT_DISPATCHES, the cap the governor works under",
    "pool_held": "1 while the dispatch pool is held at 0 for a trip, else 0",
    "stage_c_waiting": f"unclaimed cards waiting for Stage C, counted up to {BACKLOG_COUNT_BOUND}",
    "stage_d_waiting": f"unclaimed cards waiting for Stage D, counted up to {BACKLOG_COUNT_BOUND}",
    "waiting_on_configuration_hosts": "cards refused by the settings, out of the backlog until "
    "STAGE_E_FETCH_ALLOWED_HOSTS changes (counted up to the bound)",
    "waiting_on_configuration_roots": "cards refused by the settings, out of the backlog until "
    "STAGE_E_IMAGE_ROOTS changes (counted up to the bound)",
    "backlog_count_bound": "where the two backlog counts stop",
    "oldest_waiting_age_s": "seconds since the longest-waiting backlog card was created; 0 when none waits",
    "sensor_lag_s": "seconds since envelope_trip_sensor's previous tick (about 5 while the daemon keeps up)",
    "sensor_processes": "most processes ticking one sensor side by side: 1, or 2+ when two daemons share the instance",
}

@dataclass(frozen=True)
class EnvelopeReading:
    """One tick's figures, keyed as in ``READINGS``."""

    values: dict[str, float | int]

    def observation(self) -> AssetObservation:
        return AssetObservation(asset_key=ENVELOPE_KEY, metadata=dict(self.values))


def _worker_rss_mb(session: Session) -> float:
    """The newest succeeded batch's peak RSS: one row off the (status, finished_at) index."""
    peak = session.execute(
        sa.select(MicroBatch.peak_rss_mb)
        .where(MicroBatch.status == "succeeded", MicroBatch.finished_at.is_not(None))
        .order_by(MicroBatch.finished_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    return float(peak or 0.0)


def _open_trip_bars(session: Session) -> list[str]:
    """The bar of every open trip, off the partial index of open trips (few rows by construction)."""
    return list(session.execute(sa.select(EnvelopeTrip.bar).where(EnvelopeTrip.acknowledged_at.is_(None))).scalars())


def _waiting_on_configuration(session: Session) -> dict[str, int]:
    waiting = waiting_on_configuration(session, REFUSING_SETTINGS, up_to=BACKLOG_COUNT_BOUND)
    return {
        "waiting_on_configuration_hosts": waiting.get(ALLOWED_HOSTS_SETTING, 0),
        "waiting_on_configuration_roots": waiting.get(IMAGE_ROOTS_SETTING, 0),
    }


def read_envelope(session: Session, settings: Settings, *, now: datetime, sensor_lag_s: float) -> EnvelopeReading:
    """Every reading of the envelope from the catalogue and this host, in the caller's session."""
    ceilings = Ceilings.from_settings(settings)
    window = window_counts(session, ceilings.fetch_failure_window)
    bars = _open_trip_bars(session)
    control = session.get(PoolControl, DISPATCH_POOL)
    governed = control.governed_limit if control is not None and control.governed_limit is not None else None
    oldest = oldest_waiting_since(session)
    values: dict[str, float | int] = {
        "cpu_pressure": round(CpuPressure(settings.cpu_pressure_file).read() or 0.0, 2),
        "cpu_pressure_ceiling": float(settings.cpu_pressure_ceiling),
        "cpu_pressure_soft_bar": round(settings.cpu_pressure_soft_bar, 3),
        "host_load": round(host_load() or 0.0, 3),
        "host_load_ceiling": float(settings.host_load_ceiling),
        "host_load_soft_bar": float(settings.host_load_soft_bar),
        "worker_rss_mb": round(_worker_rss_mb(session), 1),
        "rss_mb_ceiling": float(settings.rss_mb_ceiling),
        "fetch_failures_in_window": window.failures,
        "fetch_outcomes_in_window": window.total,
        "fetch_failure_window": ceilings.fetch_failure_window,
        "fetch_failure_rate": round(window.failures / ceilings.fetch_failure_window, 6)
        if ceilings.fetch_failure_window
        else 0.0,
        "fetch_failure_rate_ceiling": float(settings.fetch_failure_rate_ceiling),
        "fetch_lockout_open": int("fetch_lockout" in bars),
        "fetch_lockout_ceiling": 0,
        "open_trips": len(bars),
        "governed_concurrency": min(governed, settings.max_concurrent_dispatches)
        if governed is not None
        else settings.max_concurrent_dispatches,
        "max_concurrent_dispatches": settings.max_concurrent_dispatches,
        "pool_held": int(control is not None and control.held_at is not None),
        "stage_c_waiting": waiting_cards(session, STAGE_C_PENDING, now=now, up_to=BACKLOG_COUNT_BOUND),
        "stage_d_waiting": waiting_cards(session, STAGE_D_PENDING, now=now, up_to=BACKLOG_COUNT_BOUND),
        **_waiting_on_configuration(session),
        "backlog_count_bound": BACKLOG_COUNT_BOUND,
        "oldest_waiting_age_s": round(max(0.0, (now - oldest).total_seconds()), 1) if oldest else 0.0,
        "sensor_lag_s": round(max(0.0, sensor_lag_s), 3),
        "sensor_processes": max((len(t) for t in concurrent_tickers(session, now).values()), default=1),
    }
    return EnvelopeReading(values)


ENVELOPE_DESCRIPTION = (
    "Observed, never materialized: the operating envelope as envelope_trip_sensor reads it every tick "
    "(Observe takes one reading now). Each reading against its ceiling, the governed concurrency, both "
    "backlogs, the oldest waiting card and the sensor's lag. Its check no_open_trip is red while any trip "
    "is open. Keys: " + "; ".join(f"{key}: {meaning}" for key, meaning in READINGS.items())
)
ENVELOPE_SENSOR = "envelope_trip_sensor"


def _since_sensor_tick(session: Session, now: datetime) -> float:
    """Seconds since envelope_trip_sensor's last tick (its heartbeat row); 0 before its first."""
    beat = session.get(SensorHeartbeat, ENVELOPE_SENSOR)
    return (now - beat.ticked_at).total_seconds() if beat is not None else 0.0


# Dagster 1.13 marks the decorator beta; it is the public way to an asset the UI calls observed, and
# the warning would otherwise print on every load of the code location.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", BetaWarning)

    @observable_source_asset(
        key=ENVELOPE_KEY,
        group_name="stage_e",
        description=ENVELOPE_DESCRIPTION,
        metadata={"readings": MetadataValue.json(READINGS)},
    )
    def stage_e_envelope(stage_e: StageEResource) -> ObserveResult:
        """One reading on demand (Observe in the UI), the same figures a sensor tick reports."""
        settings = stage_e.settings()
        with session_scope(stage_e.engine()) as session:
            now = utcnow()
            reading = read_envelope(session, settings, now=now, sensor_lag_s=_since_sensor_tick(session, now))
        return ObserveResult(metadata=dict(reading.values))
