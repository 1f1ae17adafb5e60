"""Settling a dispatch run that ended: the batch's next state, its ledger entry, and trips over a bar.

Both the envelope sensor (from the runs that ended) and the dispatch sensor (from the batches in
flight) call :func:`settle_run_end`, so a run end one of them misses the other still settles. Every
state change is a compare-and-set on the batch row, so settling the same run twice records one
ledger entry and one retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from typing import Any

import sqlalchemy as sa
from dagster import (
    AssetKey,
    AssetObservation,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..dispatch.batches import abandon, fail_and_retry, forget_request, get_batch
from ..dispatch.conveyor import REFUSED_GATE, REFUSED_TAKEN
from ..dispatch.ledger import failure_row
from ..envelope.bars import Ceilings, EnvelopeSignals
from ..envelope.trips import check_envelope, trip_opened_by_run
from ..settings import Settings
from .max_runtime import max_runtime_exceeded
from .run_failures import failure_reason_of
from .tags import PARTITION_TAG, REFUSED_REASON_TAG, REFUSED_TAG

ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
NOT_ENDED = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.SUSPENDED,
    DagsterRunStatus.CANCELING,
]
# A run that failed before it took its batch (the queue could not launch it: a code server restarting
# or unreachable) did none of its work, so the batch is requested again with its attempt unchanged.
# After this many requests of one batch such failures spend attempts as any other, so a deployment
# that can never start a run parks its cards instead of requesting runs forever.
UNTAKEN_FAILURES_FREE = 10


def runs_in_progress(instance: DagsterInstance) -> int:
    """Runs of any job not yet ended. A batch reads succeeded in the catalogue a moment before its
    run logs the Stage D materialization and ends, so "the catalogue is idle" is not "the runs are"."""
    return instance.get_runs_count(RunsFilter(statuses=NOT_ENDED))


@dataclass(frozen=True)
class RunEnd:
    """What settling one run did: a ledger observation to emit and a line for the tick's log."""

    observation: AssetObservation | None = None
    note: str | None = None
    retry_key: str | None = None


def _stage_d_metadata(instance: DagsterInstance, run_id: str) -> dict[str, Any]:
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    for record in records:
        mat = record.event_log_entry.asset_materialization
        if mat is not None and mat.asset_key == AssetKey("stage_d_verdicts"):
            return {k: v.value for k, v in mat.metadata.items()}
    return {}


def _check_finished_run(engine: sa.Engine, instance: DagsterInstance, run_id: str, settings: Settings) -> RunEnd:
    """Bars from a finished run's ledger row, unless the run already opened that trip itself."""
    meta = _stage_d_metadata(instance, run_id)
    with session_scope(engine) as session:
        signals = EnvelopeSignals(
            rss_mb=None if trip_opened_by_run(session, run_id, bar="rss") else meta.get("peak_rss_mb"),
            lockout_seen=bool(meta.get("lockout_trip_id"))
            and trip_opened_by_run(session, run_id, bar="fetch_lockout") is None,
        )
        trip = check_envelope(session, signals, Ceilings.from_settings(settings), run_id=run_id)
        return RunEnd(note=f"run {run_id[:8]} crossed {trip.bar}: trip {trip.trip_id}" if trip else None)


def settle_run_end(engine: sa.Engine, instance: DagsterInstance, settings: Settings, run: DagsterRun) -> RunEnd:
    """Move the run's batch on from a run that ended; a no-op when it is already settled."""
    key = run.tags.get(PARTITION_TAG)
    if key is None or run.status not in ENDED:
        return RunEnd()
    # A refused run succeeds having done nothing (see ``stage_c_evidence``): its tag, not its status, says so.
    refused = run.tags.get(REFUSED_TAG)
    if run.status == DagsterRunStatus.SUCCESS and refused is None:
        return _check_finished_run(engine, instance, run.run_id, settings)
    if refused == REFUSED_TAKEN:
        return RunEnd()  # a second run of a batch another run holds: nothing of ours to settle
    now = utcnow()
    retry_key = None
    with session_scope(engine) as session:
        try:
            batch = get_batch(session, key)
        except LookupError:
            return RunEnd()
        held = batch.status == "running" and batch.run_id == run.run_id
        timed_out = max_runtime_exceeded(instance, run.run_id) if run.status == DagsterRunStatus.CANCELED else None
        if refused == REFUSED_GATE or (run.status == DagsterRunStatus.CANCELED and timed_out is None):
            reason = (
                f"refused: {run.tags.get(REFUSED_REASON_TAG, 'the gate was closed')}"
                if refused
                else ("run cancelled before it finished")
            )
            recorded = abandon(session, key, reason=reason, now=now, run_id=run.run_id if held else None)
        elif not held and batch.status == "pending" and batch.request_count < UNTAKEN_FAILURES_FREE:
            reason = failure_reason_of(instance, run.run_id)
            record = instance.get_run_record_by_id(run.run_id)
            if record is not None:
                created = record.create_timestamp
                created = created if created.tzinfo else created.replace(tzinfo=timezone.utc)
                forget_request(session, key, made_before=created)
            return RunEnd(note=f"run {run.run_id[:8]} of {key} failed before it took the batch ({reason[:200]}); "
                               "the batch waits for its next request, its attempt unspent")
        else:
            reason = timed_out or failure_reason_of(instance, run.run_id)
            outcome = fail_and_retry(
                session,
                batch,
                reason=reason,
                now=now,
                max_attempts=settings.max_batch_attempts,
                claim_ttl_s=settings.claim_ttl_s,
                run_id=run.run_id if held else None,
            )
            recorded = outcome.recorded
            retry_key = outcome.retry.batch_key if outcome.retry else None
        if not recorded:
            return RunEnd()
        observation = AssetObservation(
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
    return RunEnd(observation, f"run {run.run_id[:8]} of {key} {run.status.value.lower()}: {reason[:160]}", retry_key)
