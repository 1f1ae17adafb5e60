"""The heartbeat every sensor writes at the start of its tick (see ``catalog.heartbeats``).

It is written only while streaming is on: off means off, so a sensor of a location with streaming
off opens no transaction at all (with no catalogue URL set it would otherwise create an empty
SQLite file and warn on every tick). ``stage-e status`` says so when it finds no heartbeat.
A heartbeat is never worth a failed tick: any error (a catalogue one migration behind, a locked
database) is logged on the tick and the tick goes on. Each tick also records the daemons that wrote
Dagster's heartbeat rows (``record_daemons``), so two daemons show even when one wins every tick.
"""

from __future__ import annotations

from dagster import SensorEvaluationContext

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.heartbeats import record_daemons, record_heartbeat
from .dagster_internals import daemon_heartbeats
from .resources import StageEResource
from .sensor_context import sensor_instance
from .tags import DISPATCH_POOL


def beat(context: SensorEvaluationContext, stage_e: StageEResource, *, sensor_name: str, interval_s: int) -> None:
    """Record this tick of ``sensor_name`` while streaming is on; logs and returns on any failure."""
    try:
        settings = stage_e.settings()
        if not settings.streaming_enabled:
            return
        daemons = daemon_heartbeats(sensor_instance(context))
        with session_scope(stage_e.engine()) as session:
            now = utcnow()
            record_heartbeat(session, sensor_name, interval_s=interval_s, settings=settings, pool=DISPATCH_POOL,
                             now=now)
            record_daemons(session, daemons, now)
    except Exception as exc:  # noqa: BLE001  (the tick matters more than its heartbeat)
        context.log.warning(f"heartbeat of {sensor_name} not recorded: {type(exc).__name__}: {str(exc)[:300]}")
