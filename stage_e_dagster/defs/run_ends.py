"""Settling a dispatch run that ended: the batch's next state, its ledger entry, and trips over a bar.

Both the envelope sensor (from the runs that ended) and the dispatch sensor (from the batches in
flight) call :func:`settle_run_end`, so a run end one of them misses the other still settles. Every
state change is a compare-and-set on the batch row, so settling the same run twice records one
ledger entry and one retry. The ledger entry of a failure or a cancellation is written to the
outbox in the transaction of that compare-and-set; ``envelope_trip_sensor`` reports it.

This module only reads Dagster's facts; which transition the batch takes is decided in
``dispatch.lifecycle``. A failure report that does not prove the worker died (see
``may_be_a_live_worker``) does not fail a batch whose run shows progress within
``dispatch.lifecycle.ALIVE_WITHIN``: the report is believed once the progress stops (the dispatch
sensor settles the run again every tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from typing import Any

import sqlalchemy as sa
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..dispatch.conveyor import REFUSED_GATE, REFUSED_TAKEN
from ..dispatch.lifecycle import RunEndFacts
from ..dispatch.lifecycle import settle_run_end as settle_batch_run_end
from ..envelope.bars import Ceilings, EnvelopeSignals
from ..envelope.trips import check_envelope, trip_opened_by_run
from ..settings import Settings
from .dagster_internals import FINISHED_STATUSES, NOT_FINISHED_STATUSES, run_materializations, runs_count
from .max_runtime import max_runtime_exceeded
from .run_failures import failure_reason_of, may_be_a_live_worker
from .tags import PARTITION_TAG, REFUSED_REASON_TAG, REFUSED_TAG

# Dagster's own grouping of run statuses, not a list of ours that a Dagster upgrade could leave behind.
ENDED = FINISHED_STATUSES
NOT_ENDED = NOT_FINISHED_STATUSES


def runs_in_progress(instance: DagsterInstance) -> int:
    """Runs of any job not yet ended. A batch reads succeeded in the catalogue a moment before its
    run logs the Stage D materialization and ends, so "the catalogue is idle" is not "the runs are"."""
    return runs_count(instance, RunsFilter(statuses=NOT_ENDED))


@dataclass(frozen=True)
class RunEnd:
    """What settling one run did: whether it changed the batch (its ledger entry is in the outbox),
    a line for the tick's log, and the retry it made."""

    recorded: bool = False
    note: str | None = None
    retry_key: str | None = None


def _stage_d_metadata(instance: DagsterInstance, run_id: str) -> dict[str, Any]:
    for mat in run_materializations(instance, run_id):
        if mat.asset_key == AssetKey("stage_d_verdicts"):
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
    """Read what Dagster recorded about a run that ended and hand it to the batch's one transition
    (``dispatch.lifecycle.settle_run_end``); a no-op when it is already settled."""
    key = run.tags.get(PARTITION_TAG)
    if key is None or run.status not in ENDED:
        return RunEnd()
    # A refused run succeeds having done nothing (see ``stage_c_evidence``): its tag, not its status, says so.
    refused = run.tags.get(REFUSED_TAG)
    if run.status == DagsterRunStatus.SUCCESS and refused is None:
        return _check_finished_run(engine, instance, run.run_id, settings)
    if refused == REFUSED_TAKEN:
        return RunEnd()  # a second run of a batch another run holds: nothing of ours to settle
    record = instance.get_run_record_by_id(run.run_id)
    created = record.create_timestamp if record is not None else None
    facts = RunEndFacts(
        run_id=run.run_id,
        status=run.status.value.lower(),
        cancelled=run.status == DagsterRunStatus.CANCELED,
        refused_at_gate=run.tags.get(REFUSED_REASON_TAG, "the gate was closed") if refused == REFUSED_GATE else None,
        # Whatever status the run ended in (the monitor's failure, or the worker's cancel written first):
        # a stop for the max runtime spends an attempt.
        timed_out=max_runtime_exceeded(instance, run.run_id) if run.status != DagsterRunStatus.SUCCESS else None,
        failure_reason=lambda: failure_reason_of(instance, run.run_id),
        may_be_live=lambda: may_be_a_live_worker(instance, run.run_id),
        created_at=None if created is None else (created if created.tzinfo else created.replace(tzinfo=timezone.utc)),
    )
    with session_scope(engine) as session:
        settled = settle_batch_run_end(session, key, facts, now=utcnow(), max_attempts=settings.max_batch_attempts,
                                       claim_ttl_s=settings.claim_ttl_s, ceilings=Ceilings.from_settings(settings))
    return RunEnd(settled.recorded, settled.note, settled.retry_key)
