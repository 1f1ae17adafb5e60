"""Settling a dispatch run that ended: the batch's next state, its ledger entry, and trips over a bar.

Both the envelope sensor (from the runs that ended) and the dispatch sensor (from the batches in
flight) call :func:`settle_run_end`, so a run end one of them misses the other still settles. Every
state change is a compare-and-set on the batch row, so settling the same run twice records one
ledger entry and one retry. The ledger entry of a failure or a cancellation is written to the
outbox in the transaction of that compare-and-set; ``envelope_trip_sensor`` reports it.

A failure report that does not prove the worker died (see ``may_be_a_live_worker``) does not fail
a batch whose run shows progress within ``ALIVE_WITHIN``: the run keeps its batch, and the report
is believed once the progress stops (the dispatch sensor settles the run again every tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from dagster import (
    AssetKey,
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
from ..dispatch.outbox import add_entry
from ..envelope.bars import Ceilings, EnvelopeSignals
from ..envelope.trips import check_envelope, trip_opened_by_run
from ..settings import Settings
from .max_runtime import max_runtime_exceeded
from .run_failures import failure_reason_of, may_be_a_live_worker
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
# A run that showed progress on its batch (a card boundary, or taking it) this recently is alive,
# whatever a report without proof says: longer than a card takes under load, short enough that a
# worker that really vanished has its batch retried within a couple of minutes.
ALIVE_WITHIN = timedelta(seconds=90)


def runs_in_progress(instance: DagsterInstance) -> int:
    """Runs of any job not yet ended. A batch reads succeeded in the catalogue a moment before its
    run logs the Stage D materialization and ends, so "the catalogue is idle" is not "the runs are"."""
    return instance.get_runs_count(RunsFilter(statuses=NOT_ENDED))


@dataclass(frozen=True)
class RunEnd:
    """What settling one run did: whether it changed the batch (its ledger entry is in the outbox),
    a line for the tick's log, and the retry it made."""

    recorded: bool = False
    note: str | None = None
    retry_key: str | None = None


def _last_sign_of_life(started_at: datetime | None, progress_at: datetime | None) -> datetime | None:
    stamps = [t for t in (started_at, progress_at) if t is not None]
    return max(stamps) if stamps else None


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
        # Whatever status the run ended in (the monitor's failure, or the worker's cancel written first):
        # a stop for the max runtime spends an attempt.
        timed_out = max_runtime_exceeded(instance, run.run_id) if run.status != DagsterRunStatus.SUCCESS else None
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
            alive = _last_sign_of_life(batch.started_at, batch.progress_at) if held else None
            if (timed_out is None and alive is not None and now - alive < ALIVE_WITHIN
                    and may_be_a_live_worker(instance, run.run_id)):
                ago = (now - alive).total_seconds()
                return RunEnd(note=f"run {run.run_id[:8]} of {key} reported failed ({reason[:160]}), but it "
                                   f"showed progress {ago:.0f} s ago: its batch stays its own")
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
        entry = failure_row(
            batch_key=key,
            card_count=len(batch.card_ids),
            trigger_reason=batch.trigger_reason,
            attempt=batch.attempt,
            run_id=run.run_id,
            failure_reason=reason,
            retry_batch_key=retry_key,
        )
        add_entry(session, batch_key=key, run_id=run.run_id, entry=entry)
    return RunEnd(True, f"run {run.run_id[:8]} of {key} {run.status.value.lower()}: {reason[:160]}", retry_key)
