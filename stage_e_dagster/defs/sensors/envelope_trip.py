"""``envelope_trip_sensor``: watches dispatch runs end and enforces the envelope.

It follows the run records of every dispatch run (sensor-launched and backfill alike, by tag)
rather than using ``@run_status_sensor``, which watches one status per sensor and reads only a
few runs per tick. For each ended run it:
- failed or killed: records a ledger entry with the failure reason, then retries the batch under a
  new key (or abandons it when the run was refused);
- succeeded: checks the run's peak RSS and lockout against their bars.
Then it samples host load and the shared fetch window, and while any trip is open it holds the pool.
"""

import json
from datetime import datetime, timezone
from typing import Any

from dagster import (
    AssetKey,
    AssetObservation,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...dispatch.batches import IN_FLIGHT, abandon, fail_and_retry, get_batch
from ...dispatch.ledger import failure_row
from ...envelope.bars import Ceilings, EnvelopeSignals
from ...envelope.signals import sample_signals
from ...envelope.trips import check_envelope, current_open_trip, trip_opened_by_run
from ..hold import hold_dispatch
from ..resources import StageEResource
from ..tags import DISPATCH_TAG, PARTITION_TAG

ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
RUNS_PER_TICK = 100


def failure_reason_of(instance: DagsterInstance, run_id: str) -> str:
    """The first step failure's error, else the run failure message, else a plain statement."""
    for event_type in (DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE):
        records = instance.get_records_for_run(run_id, of_type=event_type, limit=1).records
        for record in records:
            event = record.event_log_entry.dagster_event
            if event is None:
                continue
            if event_type == DagsterEventType.STEP_FAILURE and event.step_failure_data.error is not None:
                error = event.step_failure_data.error
                return f"{error.cls_name}: {error.message.strip()}"
            if event.message:
                return event.message
    return "run ended without a failure event (worker killed?)"


def _stage_d_metadata(instance: DagsterInstance, run_id: str) -> dict[str, Any]:
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    for record in records:
        mat = record.event_log_entry.asset_materialization
        if mat is not None and mat.asset_key == AssetKey("stage_d_verdicts"):
            return {k: v.value for k, v in mat.metadata.items()}
    return {}


def _trip_for_finished_run(session, instance: DagsterInstance, run_id: str, ceilings: Ceilings):  # type: ignore[no-untyped-def]
    """Bars from a finished run's ledger row, unless the run already opened that trip itself."""
    meta = _stage_d_metadata(instance, run_id)
    signals = EnvelopeSignals(
        rss_mb=None if trip_opened_by_run(session, run_id, bar="rss") else meta.get("peak_rss_mb"),
        lockout_seen=bool(meta.get("lockout_trip_id"))
        and trip_opened_by_run(session, run_id, bar="fetch_lockout") is None,
    )
    return check_envelope(session, signals, ceilings, run_id=run_id)


def _load_cursor(raw: str | None) -> tuple[float, set[str]]:
    if not raw:
        return 0.0, set()
    data = json.loads(raw)
    return float(data["ts"]), set(data["ids"])


@sensor(
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Sees dispatch runs end: ledger entries for failures, retries, trips over a bar, and the hold.",
)
def envelope_trip_sensor(context: SensorEvaluationContext, stage_e: StageEResource) -> SensorResult:
    settings = stage_e.settings()
    if not settings.streaming_enabled:
        return SensorResult(skip_reason="streaming is off (STAGE_E_STREAMING_ENABLED=false)")
    engine = stage_e.engine()
    ceilings = Ceilings.from_settings(settings)
    instance = context.instance
    since, seen_at_since = _load_cursor(context.cursor)
    records = instance.get_run_records(
        filters=RunsFilter(
            tags={DISPATCH_TAG: "micro-batch"},
            statuses=ENDED,
            updated_after=datetime.fromtimestamp(since, tz=timezone.utc) if since else None,
        ),
        order_by="update_timestamp",
        ascending=True,
        limit=RUNS_PER_TICK,
    )
    events: list[AssetObservation] = []
    notes: list[str] = []
    ended = 0
    newest, seen = since, set(seen_at_since)
    for record in records:
        run = record.dagster_run
        stamp = record.update_timestamp.timestamp()
        if stamp < since or (stamp == since and run.run_id in seen_at_since):
            continue
        if stamp > newest:
            newest, seen = stamp, set()
        seen.add(run.run_id)
        ended += 1
        key = run.tags.get(PARTITION_TAG)
        if key is None:
            continue
        with session_scope(engine) as session:
            if run.status == DagsterRunStatus.SUCCESS:
                trip = _trip_for_finished_run(session, instance, run.run_id, ceilings)
                if trip:
                    notes.append(f"run {run.run_id[:8]} crossed {trip.bar}: opened {trip.trip_id}")
                continue
            try:
                batch = get_batch(session, key)
            except LookupError:
                continue
            if batch.status not in IN_FLIGHT:
                continue
            reason = batch.failure_reason or failure_reason_of(instance, run.run_id)
            if reason.startswith("refused:") or run.status == DagsterRunStatus.CANCELED:
                abandon(session, batch, reason=reason, now=utcnow())
                retry_key = None
            else:
                retry = fail_and_retry(
                    session,
                    batch,
                    reason=reason,
                    now=utcnow(),
                    max_attempts=settings.max_batch_attempts,
                    claim_ttl_s=settings.claim_ttl_s,
                )
                retry_key = retry.batch_key if retry else None
            events.append(
                AssetObservation(
                    asset_key=AssetKey("stage_c_evidence"),
                    partition=key,
                    metadata=failure_row(
                        batch_key=key,
                        card_count=len(batch.card_ids),
                        trigger_reason=batch.trigger_reason,
                        attempt=batch.attempt,
                        run_id=run.run_id,
                        failure_reason=reason,
                        retry_batch_key=retry_key,
                    ),
                )
            )
            notes.append(f"run {run.run_id[:8]} of {key} {run.status.value.lower()}: {reason[:120]}")

    with session_scope(engine) as session:
        open_trip = current_open_trip(session)
        if open_trip is None:
            open_trip = check_envelope(session, sample_signals(session, ceilings), ceilings)
            if open_trip:
                notes.append(f"envelope sample crossed {open_trip.bar}: opened {open_trip.trip_id}")
    if open_trip is not None:
        cancelled = hold_dispatch(instance, engine, reason=f"trip {open_trip.trip_id} open")
        notes.append(
            f"trip {open_trip.trip_id} ({open_trip.bar}) open: pool held at 0, {cancelled} queued run(s) cancelled"
        )
    cursor = json.dumps({"ts": newest, "ids": sorted(seen)})
    if not events and not notes:
        return SensorResult(
            skip_reason=f"{ended} dispatch run(s) ended since the last tick; envelope within bars", cursor=cursor
        )
    context.log.info("; ".join(notes))
    return SensorResult(asset_events=events, cursor=cursor, skip_reason=None if events else "; ".join(notes))
