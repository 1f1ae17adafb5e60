"""``envelope_trip_sensor``: watches dispatch runs end and enforces the envelope.

It reads the run records that ended (by status and update time, both indexed; dispatch runs are
then picked by tag in Python) rather than using ``@run_status_sensor``, which watches one status
per sensor and reads only a few runs per tick. A run end can commit after a newer one was read,
so each tick reads again an overlap window behind its newest run end and skips the run ids it has
already settled there; ``card_created_sensor`` also settles, from each batch's own runs, whatever
this sensor misses. For each ended run it settles the batch (see ``defs.run_ends``). Then it
samples host load and the shared fetch window, and while any trip is open it holds the pool.
"""

import json
import time
from datetime import datetime, timezone

from dagster import (
    AssetObservation,
    DefaultSensorStatus,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ...catalog.engine import session_scope
from ...dispatch.guard import FLAG_OFF
from ...envelope.bars import Ceilings
from ...envelope.signals import sample_signals
from ...envelope.trips import check_envelope, current_open_trip
from ..hold import hold_dispatch, is_dispatch_run
from ..resources import StageEResource
from ..run_ends import ENDED, settle_run_end

RUNS_PER_TICK = 100
# How far behind its newest run end each tick reads again: a run end that commits this much later
# than a newer one is still seen here (the dispatch sensor settles anything later still).
OVERLAP_S = 120.0


def _load_cursor(raw: str | None) -> tuple[float, dict[str, float]]:
    """(newest update time read, {run id: update time} settled inside the overlap window).

    A first tick starts one overlap window back, not at the start of history: it costs what any
    tick costs, and the batches of runs that ended earlier are settled by the dispatch sensor."""
    if not raw:
        return time.time(), {}
    data = json.loads(raw)
    return float(data.get("ts", 0.0)), {str(k): float(v) for k, v in data.get("seen", {}).items()}


@sensor(
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Sees dispatch runs end: ledger entries for failures, retries, trips over a bar, and the hold.",
)
def envelope_trip_sensor(context: SensorEvaluationContext, stage_e: StageEResource) -> SensorResult:
    settings = stage_e.settings()
    if not settings.streaming_enabled:
        return SensorResult(skip_reason=FLAG_OFF)
    engine = stage_e.engine()
    ceilings = Ceilings.from_settings(settings)
    instance = context.instance
    newest, seen = _load_cursor(context.cursor)
    records = instance.get_run_records(
        filters=RunsFilter(statuses=ENDED, updated_after=datetime.fromtimestamp(newest - OVERLAP_S, tz=timezone.utc)),
        order_by="update_timestamp",
        ascending=True,
        limit=RUNS_PER_TICK + len(seen),
    )
    events: list[AssetObservation] = []
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
    cursor = json.dumps({"ts": newest, "seen": seen})
    if not events and not notes:
        return SensorResult(
            skip_reason=f"{ended} dispatch run(s) ended since the last tick; envelope within bars", cursor=cursor
        )
    context.log.info("; ".join(notes))
    return SensorResult(asset_events=events, cursor=cursor, skip_reason=None if events else "; ".join(notes))
