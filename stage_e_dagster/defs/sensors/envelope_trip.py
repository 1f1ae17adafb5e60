"""``envelope_trip_sensor``: watches dispatch runs end and enforces the envelope.

It reads the run records that ended (by status and update time, both indexed; dispatch runs are
then picked by tag in Python) rather than using ``@run_status_sensor``, which watches one status
per sensor and reads only a few runs per tick. A run end can commit after a newer one was read,
so each tick reads again an overlap window behind its newest run end and skips the run ids it has
already settled there; ``card_created_sensor`` also settles, from each batch's own runs, whatever
this sensor misses. For each ended run it settles the batch (see ``defs.run_ends``). Then it
samples the shared fetch window (CPU contention is read by the dispatch sensors' governor), and
while any trip is open it holds the pool.
Last, it observes ``stage_e_envelope`` (every reading; every ``OBSERVE_EVERY_S``, and at once when
the check's answer changes) and evaluates its ``no_open_trip`` check whenever the answer differs
from the one its cursor remembers.
"""

import json
import time
from datetime import datetime, timezone

from dagster import (
    AssetCheckEvaluation,
    AssetObservation,
    DefaultSensorStatus,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...dispatch.guard import FLAG_OFF
from ...envelope.bars import Ceilings
from ...envelope.signals import sample_signals
from ...envelope.trips import check_envelope, current_open_trip
from ..checks import trip_verdict
from ..envelope_asset import read_envelope
from ..heartbeat import beat
from ..hold import hold_dispatch, is_dispatch_run
from ..resources import StageEResource
from ..run_ends import ENDED, settle_run_end
from .dispatching import EVERY_DAEMON_PASS_S

INTERVAL_S = EVERY_DAEMON_PASS_S
RUNS_PER_TICK = 100
# How far behind its newest run end each tick reads again: a run end that commits this much later
# than a newer one is still seen here (the dispatch sensor settles anything later still).
OVERLAP_S = 120.0
# One envelope observation per this many seconds (a point every 30 s plots as well as one every 5 s,
# at a sixth of the event-log rows), and one at once whenever a trip opens or is acknowledged.
OBSERVE_EVERY_S = 30.0


def _load_cursor(raw: str | None) -> tuple[float, dict[str, float]]:
    """(newest update time read, {run id: update time} settled inside the overlap window).

    A first tick starts one overlap window back, not at the start of history: it costs what any
    tick costs, and the batches of runs that ended earlier are settled by the dispatch sensor."""
    if not raw:
        return time.time(), {}
    data = json.loads(raw)
    return float(data.get("ts", 0.0)), {str(k): float(v) for k, v in data.get("seen", {}).items()}


def _load_tick_memory(raw: str | None) -> tuple[float | None, str | None, float]:
    """(when the previous tick ran, the no_open_trip answer it last reported, when it last observed
    the envelope); absent (0 for the last) at first."""
    data = json.loads(raw) if raw else {}
    tick = data.get("tick")
    return (float(tick) if tick is not None else None), data.get("check"), float(data.get("observed", 0.0))


@sensor(
    minimum_interval_seconds=INTERVAL_S,
    default_status=DefaultSensorStatus.RUNNING,
    description="Sees dispatch runs end: ledger entries for failures, retries, trips over a bar, and the hold.",
)
def envelope_trip_sensor(context: SensorEvaluationContext, stage_e: StageEResource) -> SensorResult:
    beat(context, stage_e, sensor_name="envelope_trip_sensor", interval_s=INTERVAL_S)
    settings = stage_e.settings()
    if not settings.streaming_enabled:
        return SensorResult(skip_reason=FLAG_OFF)
    engine = stage_e.engine()
    ceilings = Ceilings.from_settings(settings)
    instance = context.instance
    newest, seen = _load_cursor(context.cursor)
    tick_at = time.time()
    previous_tick, reported_check, observed_at = _load_tick_memory(context.cursor)
    records = instance.get_run_records(
        filters=RunsFilter(statuses=ENDED, updated_after=datetime.fromtimestamp(newest - OVERLAP_S, tz=timezone.utc)),
        order_by="update_timestamp",
        ascending=True,
        limit=RUNS_PER_TICK + len(seen),
    )
    events: list[AssetObservation | AssetCheckEvaluation] = []
    notes: list[str] = []
    ended = 0
    for record in records:
        run = record.dagster_run
        stamp = record.update_timestamp.timestamp()
        newest = max(newest, stamp)
        if run.run_id in seen or not is_dispatch_run(run):
            continue
        seen[run.run_id] = stamp
        ended += 1
        end = settle_run_end(engine, instance, settings, run)
        if end.observation is not None:
            events.append(end.observation)
        if end.note:
            notes.append(end.note)
    seen = {run_id: stamp for run_id, stamp in seen.items() if stamp >= newest - OVERLAP_S}

    with session_scope(engine) as session:
        open_trip = current_open_trip(session)
        if open_trip is None:
            open_trip = check_envelope(session, sample_signals(session, ceilings), ceilings)
            if open_trip:
                notes.append(f"envelope sample crossed {open_trip.bar}: opened {open_trip.trip_id}")
    if open_trip is not None:
        cancelled = hold_dispatch(instance, engine, trip_id=open_trip.trip_id, reason=f"trip {open_trip.trip_id} open")
        notes.append(
            f"trip {open_trip.trip_id} ({open_trip.bar}) open: pool held at 0, {cancelled} queued run(s) cancelled"
        )
    with session_scope(engine) as session:
        verdict = trip_verdict(session)
        if verdict.state != reported_check or tick_at - observed_at >= OBSERVE_EVERY_S:
            reading = read_envelope(
                session, settings, now=utcnow(), sensor_lag_s=tick_at - previous_tick if previous_tick else 0.0
            )
            events.append(reading.observation())
            observed_at = tick_at
    if verdict.state != reported_check:
        events.append(verdict.evaluation())
    cursor = json.dumps(
        {"ts": newest, "seen": seen, "tick": tick_at, "check": verdict.state, "observed": observed_at}
    )
    if not notes:
        return SensorResult(
            asset_events=events,
            skip_reason=f"{ended} dispatch run(s) ended since the last tick; envelope within bars",
            cursor=cursor,
        )
    context.log.info("; ".join(notes))
    return SensorResult(asset_events=events, cursor=cursor, skip_reason="; ".join(notes))
