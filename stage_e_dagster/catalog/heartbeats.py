"""Sensor heartbeats: what a tick records of the running code location, and how old that record is.

The daemon and the shell read ``STAGE_E_*`` in different processes, often on different hosts, so
the shell's own settings say nothing of what dispatch runs with. Every tick therefore rewrites its
sensor's row with the settings it ran with; ``stage-e status`` compares them with its own.
Each ticking process also keeps a row of its own (``sensor_tickers``): two processes whose ticks of
one sensor interleave are two daemons on one instance, which Dagster does not support. Dagster lets
only one of them run a given tick (the other finds it under the minimum interval), and with steady
passes the same daemon can win every tick; so the ticks also record which daemons write Dagster's own
heartbeat rows, which every daemon rewrites every 30 s whether or not it wins a tick.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..settings import Settings
from .engine import dialect_insert
from .models import PoolControl, SensorHeartbeat, SensorTicker

# A sensor that has not ticked for this many of its intervals is reported as stale: one late tick
# is ordinary (a slow tick, a busy daemon), three in a row mean the daemon or the sensor stopped.
STALE_AFTER_INTERVALS = 3
# The interval counted is at least this: the sensor daemon runs every sensor in one pass of at least
# 5 s, and a slow tick of one sensor (retention on a big instance) delays the others in that pass.
MIN_COUNTED_INTERVAL_S = 10
# A ticker's row is deleted this long after its last tick (a restarted code server leaves one behind).
FORGET_TICKER_AFTER = timedelta(hours=1)
# The ticker row under which each Dagster daemon (by its daemon id) is recorded, and how often a
# daemon rewrites its heartbeat rows (Dagster's DEFAULT_HEARTBEAT_INTERVAL_SECONDS).
DAEMON_TICKER = "dagster-daemon"
DAEMON_HEARTBEAT_INTERVAL_S = 30


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings that decide what dispatch does, as plain JSON values. The database URL, the image
    roots and the allowed hosts are left out: they may hold secrets or paths of another host."""
    return {
        "streaming_enabled": settings.streaming_enabled,
        "micro_batch_size": settings.micro_batch_size,
        "batch_target_s": settings.batch_target_s,
        "max_concurrent_dispatches": settings.max_concurrent_dispatches,
        "cpu_pressure_ceiling": settings.cpu_pressure_ceiling,
        "cpu_pressure_soft": round(settings.cpu_pressure_soft_bar, 3),
        "host_load_ceiling": round(settings.host_load_ceiling, 3),
        "host_load_soft": round(settings.host_load_soft_bar, 3),
        "host_load_trip_after_s": settings.host_load_trip_after_s,
        "rss_mb_ceiling": settings.rss_mb_ceiling,
        "fetch_failure_rate_ceiling": settings.fetch_failure_rate_ceiling,
        "fetch_failure_window": settings.fetch_failure_window,
        "fetch_rate_per_sec": settings.fetch_rate_per_sec,
        "retention_days": settings.retention_days,
    }


def governed_limit(session: Session, pool: str) -> int | None:
    """The dispatch concurrency the host-load governor allows now (a primary-key read, no lock)."""
    return session.execute(sa.select(PoolControl.governed_limit).where(PoolControl.pool == pool)).scalar_one_or_none()


def record_heartbeat(
    session: Session, sensor_name: str, *, interval_s: int, settings: Settings, pool: str, now: datetime
) -> None:
    """One upsert of the sensor's row. The row only moves forward in time: a slow tick that began
    before a newer one finished writing leaves the newer row in place."""
    ticked_by = f"{socket.gethostname()}:{os.getpid()}"[:160]
    values = {
        "sensor_name": sensor_name,
        "ticked_at": now,
        "interval_s": interval_s,
        "settings": effective_settings(settings),
        "governed_limit": governed_limit(session, pool),
        "ticked_by": ticked_by,
    }
    insert = dialect_insert(session)(SensorHeartbeat).values(**values)
    session.execute(
        insert.on_conflict_do_update(
            index_elements=["sensor_name"],
            set_={name: insert.excluded[name] for name in values if name != "sensor_name"},
            where=SensorHeartbeat.ticked_at < insert.excluded.ticked_at,
        )
    )
    _record_ticker(session, sensor_name, ticked_by, now, now=now)


def record_daemons(session: Session, heartbeats: Iterable[tuple[str | None, float]], now: datetime) -> None:
    """Record each daemon id found in Dagster's heartbeat rows (``(daemon_id, timestamp)``), at the
    time of its newest row rather than now: a restarted daemon's old rows linger until the new one
    rewrites them, and their older times keep the old id's span from overlapping the new one's."""
    newest: dict[str, float] = {}
    for daemon_id, timestamp in heartbeats:
        if daemon_id:
            newest[daemon_id] = max(timestamp, newest.get(daemon_id, timestamp))
    for daemon_id, timestamp in sorted(newest.items()):
        beat_at = datetime.fromtimestamp(timestamp, tz=timezone.utc)
        _record_ticker(session, DAEMON_TICKER, f"daemon {daemon_id}"[:160], beat_at, now=now)


def _record_ticker(session: Session, sensor_name: str, ticked_by: str, ticked_at: datetime, *, now: datetime) -> None:
    insert = dialect_insert(session)(SensorTicker).values(
        sensor_name=sensor_name, ticked_by=ticked_by, first_ticked_at=ticked_at, ticked_at=ticked_at
    )
    session.execute(
        insert.on_conflict_do_update(
            index_elements=["sensor_name", "ticked_by"],
            set_={"ticked_at": insert.excluded.ticked_at},
            where=SensorTicker.ticked_at < insert.excluded.ticked_at,
        )
    )
    session.execute(
        sa.delete(SensorTicker).where(SensorTicker.sensor_name == sensor_name,
                                      SensorTicker.ticked_at < now - FORGET_TICKER_AFTER)
    )


def concurrent_tickers(session: Session, now: datetime) -> dict[str, list[str]]:
    """``{sensor: [host:pid, ...]}`` for each sensor that two or more live processes tick side by side.

    Live: ticked within ``STALE_AFTER_INTERVALS`` of the sensor's interval. Side by side: their spans
    of ticks overlap, so a code server restarted (a new pid after the old one's last tick) is not
    counted, while two daemons, whose ticks interleave, are."""
    intervals = dict(session.execute(sa.select(SensorHeartbeat.sensor_name, SensorHeartbeat.interval_s)).all())
    intervals[DAEMON_TICKER] = DAEMON_HEARTBEAT_INTERVAL_S
    rows = session.execute(sa.select(SensorTicker).where(SensorTicker.ticked_at >= now - FORGET_TICKER_AFTER))
    by_sensor: dict[str, list[SensorTicker]] = {}
    for ticker in rows.scalars():
        horizon = STALE_AFTER_INTERVALS * max(intervals.get(ticker.sensor_name, 0), MIN_COUNTED_INTERVAL_S)
        if (now - ticker.ticked_at).total_seconds() <= horizon:
            by_sensor.setdefault(ticker.sensor_name, []).append(ticker)
    found: dict[str, list[str]] = {}
    for name, tickers in by_sensor.items():
        side_by_side = {
            t.ticked_by
            for t in tickers
            for u in tickers
            if t is not u and t.first_ticked_at < u.ticked_at and u.first_ticked_at < t.ticked_at
        }
        if side_by_side:
            found[name] = sorted(side_by_side)
    return found


def read_heartbeats(session: Session) -> list[SensorHeartbeat]:
    """Every sensor's row, newest tick first (one row per sensor: a handful)."""
    return list(session.execute(sa.select(SensorHeartbeat).order_by(SensorHeartbeat.ticked_at.desc())).scalars())


def is_stale(heartbeat: SensorHeartbeat, now: datetime) -> bool:
    """Whether the sensor has missed ``STALE_AFTER_INTERVALS`` of its ticks in a row."""
    interval = max(heartbeat.interval_s, MIN_COUNTED_INTERVAL_S)
    return (now - heartbeat.ticked_at).total_seconds() > STALE_AFTER_INTERVALS * interval


def settings_differences(recorded: dict[str, Any], own: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (recorded, own)}`` for every setting the two disagree on."""
    return {name: (recorded.get(name), own.get(name))
            for name in sorted(set(recorded) | set(own)) if recorded.get(name) != own.get(name)}
