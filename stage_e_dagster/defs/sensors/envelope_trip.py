"""``envelope_trip_sensor``: watches dispatch runs end and enforces the envelope.

It reads the run-status events that ended runs (success, failure, cancellation) after a storage-id
cursor per event type, as Dagster's own run-status sensors do: every event read moves the cursor,
whichever job's run it ended, so no number of other jobs' runs can hold it in place. (An event
that commits after a newer one was read is passed over here; ``card_created_sensor`` settles every
batch in flight from its own runs, so nothing is lost.) For each ended dispatch run it settles the
batch (see ``defs.run_ends``), then reports the ledger outbox: every entry not yet reported is
emitted with this tick and named in its cursor, and the next tick marks those reported. Then it
samples the shared fetch window (CPU contention is read by the dispatch sensors' governor); while
any trip is open it holds the pool, and with none open it gives back a hold whose trip was
acknowledged. Last, it observes ``stage_e_envelope``
(every ``OBSERVE_EVERY_S``, and at once when the check's answer changes) and evaluates its
``no_open_trip`` check whenever the answer differs from the one its cursor remembers.
"""

import json
import time
from typing import Any

import sqlalchemy as sa
from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetObservation,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DefaultSensorStatus,
    RunsFilter,
    RunStatusChangeRecordsFilter,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...catalog.heartbeats import concurrent_tickers
from ...dispatch.guard import FLAG_OFF
from ...dispatch.outbox import mark_reported, unreported_entries
from ...envelope.bars import Ceilings
from ...envelope.signals import sample_signals
from ...envelope.trips import check_envelope, current_open_trip
from ..checks import trip_verdict
from ..dagster_internals import runs as dagster_runs
from ..envelope_asset import read_envelope
from ..heartbeat import beat
from ..hold import hold_dispatch, release_hold
from ..run_ends import ENDED, settle_run_end
from ..run_queue import ACTIVE_STATUSES, dispatch_cap, is_dispatch_run
from ..sensor_context import sensor_instance, sensor_resource
from ..tags import PARTITION_TAG
from .dispatching import EVERY_DAEMON_PASS_S

INTERVAL_S = EVERY_DAEMON_PASS_S
# Run-status events read per event type and tick; the cursor moves past each one read.
RUNS_PER_TICK = 100
# Where a first tick starts reading: this far back, not at the start of history (the batches of runs
# that ended earlier are settled by the dispatch sensor).
OVERLAP_S = 120.0
# How long an end event whose run does not read ended yet holds the cursor before it.
STATUS_LAG_S = 60.0
# The run-end events read, one storage-id cursor each.
RUN_END_EVENTS = (DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED)
# One envelope observation per this many seconds (a point every 30 s plots as well as one every 5 s,
# at a sixth of the event-log rows), and one at once whenever a trip opens or is acknowledged.
OBSERVE_EVERY_S = 30.0


def _load_cursor(raw: str | None) -> dict[str, Any]:
    """The cursor's fields: ``after`` ({event type: last storage id read}), ``reporting`` (outbox ids
    the tick that stored this cursor emitted), ``tick``, ``check`` and ``observed`` (see below)."""
    return json.loads(raw) if raw else {}


def _ended_runs(instance: DagsterInstance, after: dict[str, int], start_ts: float) -> tuple[list[DagsterRun], int]:
    """Runs whose end events follow the cursor, in event order, each once; moves ``after`` past every
    event read. Returns the runs and how many events were read.

    The one exception: a dispatch run whose end event is stored but whose status is not yet (the run
    storage is written after the event) holds its event type's cursor just before that event, for at
    most ``STATUS_LAG_S``; after that its batch is the dispatch sensor's to settle."""
    read: list[tuple[str, int, str, float]] = []
    for event_type in RUN_END_EVENTS:
        last = after.get(event_type.value)
        records_filter = (
            RunStatusChangeRecordsFilter(event_type, after_storage_id=int(last))
            if last is not None
            else RunStatusChangeRecordsFilter(event_type, after_timestamp=start_ts)
        )
        records = instance.fetch_run_status_changes(records_filter, limit=RUNS_PER_TICK, ascending=True).records
        read += [(event_type.value, r.storage_id, r.event_log_entry.run_id, r.timestamp) for r in records]
    unique = list(dict.fromkeys(run_id for _, _, run_id, _ in read))
    runs = {run.run_id: run for run in dagster_runs(instance, RunsFilter(run_ids=unique))} if unique else {}
    now = time.time()
    held: set[str] = set()
    for event_type, storage_id, run_id, stamp in read:
        if event_type in held:
            continue
        run = runs.get(run_id)
        if run is not None and is_dispatch_run(run) and run.status not in ENDED and now - stamp < STATUS_LAG_S:
            held.add(event_type)
            continue
        after[event_type] = max(int(after.get(event_type) or 0), storage_id)
    return [runs[run_id] for run_id in unique if run_id in runs], len(read)


def _batches_with_a_run_going(instance: DagsterInstance, ended: list[DagsterRun]) -> set[str]:
    """The batches among these runs' that have another run not ended (a batch requested again has one run
    per request): settling one run's end then would give back a batch the other run is about to take or
    holds. One read for all of them."""
    keys = sorted({key for run in ended if (key := run.tags.get(PARTITION_TAG))})
    if not keys:
        return set()
    going = dagster_runs(instance, RunsFilter(tags={PARTITION_TAG: keys}, statuses=ACTIVE_STATUSES))
    return {key for run in going if (key := run.tags.get(PARTITION_TAG))}


def _report_outbox(engine: sa.Engine, reported: list[int]) -> tuple[list[AssetObservation], list[int]]:
    """Mark what the last stored tick emitted, then the entries still to report, as observations."""
    with session_scope(engine) as session:
        mark_reported(session, reported, now=utcnow())
        entries = unreported_entries(session)
        return (
            [
                AssetObservation(asset_key=AssetKey("stage_c_evidence"), partition=e.batch_key, metadata=e.entry)
                for e in entries
            ],
            [e.id for e in entries],
        )


@sensor(
    minimum_interval_seconds=INTERVAL_S,
    default_status=DefaultSensorStatus.RUNNING,
    description="Sees dispatch runs end: ledger entries for failures, retries, trips over a bar, and the hold.",
)
def envelope_trip_sensor(context: SensorEvaluationContext) -> SensorResult:
    stage_e = sensor_resource(context)
    beat(context, stage_e, sensor_name="envelope_trip_sensor", interval_s=INTERVAL_S)
    settings = stage_e.settings()
    if not settings.streaming_enabled:
        return SensorResult(skip_reason=FLAG_OFF)
    engine = stage_e.engine()
    ceilings = Ceilings.from_settings(settings)
    instance = sensor_instance(context)
    memory = _load_cursor(context.cursor)
    tick_at = time.time()
    previous_tick, reported_check = memory.get("tick"), memory.get("check")
    observed_at = float(memory.get("observed", 0.0))
    after: dict[str, int] = dict(memory.get("after") or {})
    start_ts = float(memory.get("ts", tick_at)) - OVERLAP_S  # "ts": the cursor of the release before this one
    runs, read = _ended_runs(instance, after, start_ts)
    events: list[AssetObservation | AssetCheckEvaluation] = []
    notes: list[str] = []
    ended = 0
    ended_runs = [run for run in runs if is_dispatch_run(run) and run.status in ENDED]
    busy = _batches_with_a_run_going(instance, ended_runs)
    for run in ended_runs:
        ended += 1
        if run.tags.get(PARTITION_TAG) in busy:
            continue  # another run of the batch is queued or going: the dispatch sensor settles it after that one
        end = settle_run_end(engine, instance, settings, run)
        if end.note:
            notes.append(end.note)
    entries, reporting = _report_outbox(engine, [int(i) for i in memory.get("reporting") or []])
    events.extend(entries)

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
    elif release_hold(instance, engine, cap=dispatch_cap(instance, settings.max_concurrent_dispatches)):
        notes.append("the acknowledged trip's hold is released: the pool has its limit back")
    with session_scope(engine) as session:
        side_by_side = concurrent_tickers(session, utcnow())
        verdict = trip_verdict(session)
        if verdict.state != reported_check or tick_at - observed_at >= OBSERVE_EVERY_S:
            reading = read_envelope(
                session, settings, now=utcnow(), sensor_lag_s=tick_at - previous_tick if previous_tick else 0.0
            )
            events.append(reading.observation())
            observed_at = tick_at
    if verdict.state != reported_check:
        events.append(verdict.evaluation())
    if side_by_side:
        said = "; ".join(f"{len(t)} processes tick {name} side by side ({', '.join(t)})"
                         for name, t in side_by_side.items())
        context.log.warning(f"{said}: two Dagster daemons on one instance, which Dagster does not support; "
                            "stop all but one")
    cursor = json.dumps(
        {"after": after, "reporting": reporting, "tick": tick_at, "check": verdict.state, "observed": observed_at}
    )
    if not notes:
        return SensorResult(
            asset_events=events,
            skip_reason=f"{ended} dispatch run(s) ended since the last tick; envelope within bars "
            f"({read} run end(s) read)",
            cursor=cursor,
        )
    context.log.info("; ".join(notes))
    return SensorResult(asset_events=events, cursor=cursor, skip_reason="; ".join(notes))
