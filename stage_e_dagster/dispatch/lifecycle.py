"""What happens next to a micro-batch in flight: the decisions, from facts the Dagster layer read.

The Dagster layer reads what Dagster recorded (a run's end: refused and why, cancelled, stopped for
its max runtime, why it failed, whether the report proves the worker died; whether a run of the batch
is going; whether a sweep's backfill still launches runs) and calls one function here per batch.
Which transition follows lives here, beside the transitions themselves (``batches.py``): each is a
compare-and-set, so two evaluators deciding alike move a batch once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy.orm import Session

from ..catalog.models import MicroBatch
from ..envelope.bars import Ceilings
from ..envelope.signals import failure_signals
from ..envelope.trips import check_envelope, current_open_trip
from .backlog_walk import SWEEP_TRIGGER
from .batch_rows import failure_row
from .batches import Failed, abandon, fail_and_retry, forget_request, get_batch
from .outbox import add_entry

# A run that failed before it took its batch (the queue could not launch it: a code server restarting
# or unreachable) did none of its work, so the batch is requested again with its attempt unchanged.
# After this many requests of one batch such failures spend attempts as any other, so a deployment
# that can never start a run parks its cards instead of requesting runs forever.
UNTAKEN_FAILURES_FREE = 10
# A run that showed progress on its batch (a card boundary, or taking it) this recently is alive,
# whatever a report without proof says: longer than a card takes under load, short enough that a
# worker that really vanished has its batch retried within a couple of minutes.
ALIVE_WITHIN = timedelta(seconds=90)
# A batch requested less than this long ago may simply not have its run yet (the daemon submits a
# tick's requests after the tick): it is not requested again before then.
REQUEST_GRACE = timedelta(seconds=60)

# What reconciling does with a batch in flight (see :func:`next_step`).
RENEW, EXPIRE, REQUEST, WAIT = "renew", "expire", "request", "wait"


@dataclass(frozen=True)
class RunEndFacts:
    """What Dagster recorded about a dispatch run that ended other than in plain success."""

    run_id: str
    status: str  # the run's end status, for the tick's note
    cancelled: bool
    refused_at_gate: str | None  # why the in-run guard refused it (streaming off, a trip), if it did
    timed_out: str | None  # why the run monitor stopped it for its max runtime, if it did
    failure_reason: Callable[[], str]  # read from the event log only when needed
    may_be_live: Callable[[], bool]  # the report does not prove that the worker died
    created_at: datetime | None  # when the run was created (its request)


@dataclass(frozen=True)
class Settled:
    """``recorded``: this call moved the batch (its ledger entry is in the outbox)."""

    recorded: bool = False
    note: str | None = None
    retry_key: str | None = None


def _last_sign_of_life(started_at: datetime | None, progress_at: datetime | None) -> datetime | None:
    stamps = [t for t in (started_at, progress_at) if t is not None]
    return max(stamps) if stamps else None


def settle_run_end(
    session: Session, batch_key: str, facts: RunEndFacts, *, now: datetime, max_attempts: int, claim_ttl_s: int,
    ceilings: Ceilings | None = None,
) -> Settled:
    """Move the batch on from its run's end: abandoned (a refusal at the gate, a person's cancel: no
    attempt spent), its request forgotten (the run failed before taking it), left alone (a report
    without proof about a worker still making progress), or failed and retried or parked.

    With ``ceilings``, a failure also samples the failure bars in the same transaction: batches failed
    for one cause with none finishing cleanly in between open a ``failed_batches`` trip naming it, so
    the cards they park are never parked unseen (the acknowledgement gives them back)."""
    try:
        batch = get_batch(session, batch_key)
    except LookupError:
        return Settled()
    held = batch.status == "running" and batch.run_id == facts.run_id
    retry_key = None
    failed = False
    if facts.refused_at_gate is not None or (facts.cancelled and facts.timed_out is None):
        reason = f"refused: {facts.refused_at_gate}" if facts.refused_at_gate is not None else (
            "run cancelled before it finished")
        recorded = abandon(session, batch_key, reason=reason, now=now, run_id=facts.run_id if held else None)
    elif not held and batch.status == "pending" and batch.request_count < UNTAKEN_FAILURES_FREE:
        reason = facts.failure_reason()
        if facts.created_at is not None:
            forget_request(session, batch_key, made_before=facts.created_at)
        return Settled(note=f"run {facts.run_id[:8]} of {batch_key} failed before it took the batch "
                            f"({reason[:200]}); the batch waits for its next request, its attempt unspent")
    else:
        reason = facts.timed_out or facts.failure_reason()
        alive = _last_sign_of_life(batch.started_at, batch.progress_at) if held else None
        if facts.timed_out is None and alive is not None and now - alive < ALIVE_WITHIN and facts.may_be_live():
            ago = (now - alive).total_seconds()
            return Settled(note=f"run {facts.run_id[:8]} of {batch_key} reported failed ({reason[:160]}), but it "
                                f"showed progress {ago:.0f} s ago: its batch stays its own")
        outcome = fail_and_retry(session, batch, reason=reason, now=now, max_attempts=max_attempts,
                                 claim_ttl_s=claim_ttl_s, run_id=facts.run_id if held else None)
        recorded = failed = outcome.recorded
        retry_key = outcome.retry.batch_key if outcome.retry else None
    if not recorded:
        return Settled()
    entry = failure_row(batch_key=batch_key, card_count=len(batch.card_ids), trigger_reason=batch.trigger_reason,
                        attempt=batch.attempt, run_id=facts.run_id, failure_reason=reason, retry_batch_key=retry_key)
    add_entry(session, batch_key=batch_key, run_id=facts.run_id, entry=entry)
    note = f"run {facts.run_id[:8]} of {batch_key} {facts.status}: {reason[:160]}"
    if ceilings is not None and failed and current_open_trip(session) is None:
        trip = check_envelope(session, failure_signals(session, ceilings), ceilings, run_id=facts.run_id)
        if trip is not None:
            note += f"; {trip.bar} crossed: trip {trip.trip_id} ({str(trip.detail.get('cause'))[:160]})"
    return Settled(True, note, retry_key)


def next_step(
    batch: MicroBatch, *, run_going: bool, run_ended: bool, backfill_launching: Callable[[], bool], now: datetime
) -> str:
    """What reconciling does with a batch whose runs this pass left unsettled: ``RENEW`` its lease (a
    run of it is going, or its sweep's backfill may still launch one), ``EXPIRE`` it (running, with no
    run going past its lease), ``REQUEST`` it again, or ``WAIT``. Leases run from the last renewal, so
    a batch that waited out a long trip or a full pool is requested again, never failed."""
    if run_going:
        return RENEW
    if batch.status == "running":
        return EXPIRE if batch.lease_expires_at is not None and batch.lease_expires_at < now else WAIT
    owned_by_sweep = _owned_by_sweep(batch)
    if owned_by_sweep and not run_ended and backfill_launching():
        return RENEW
    if batch.requested_at is None or batch.requested_at < now - REQUEST_GRACE or run_ended or owned_by_sweep:
        return REQUEST
    return WAIT


def _owned_by_sweep(batch: MicroBatch) -> bool:
    """The batch is a sweep's own partition: its first attempt, under the key the backfill targets."""
    return batch.trigger_reason == SWEEP_TRIGGER and bool(batch.backfill_id) and batch.attempt == 1


def backfill_to_rejoin(batch: MicroBatch, *, backfill_launching: Callable[[], bool]) -> str | None:
    """The backfill a batch requested again runs in: its sweep's, while that backfill is still going, else
    none (a plain sensor run).

    A sweep's run can fail before any step without taking its batch (its worker could not import the code:
    a file saved half-way, a ``dg dev`` reload of broken code, while the code server still serves what it
    loaded before). Dagster counts that partition failed, and only a materialization by a run of the same
    backfill clears it (``asset_backfill._get_failed_asset_graph_subset`` subtracts what the backfill's runs
    materialized); a backfill waits for every run carrying its id. Requested outside it, the cards are read
    but the backfill ends COMPLETED_FAILED. A later attempt is a new key the backfill never targeted."""
    return batch.backfill_id if _owned_by_sweep(batch) and backfill_launching() else None


def expire_lease(session: Session, batch_key: str, *, now: datetime, max_attempts: int, claim_ttl_s: int) -> Failed:
    """running -> failed (and a retry, or parked): the run that held the batch is gone past its lease."""
    batch = get_batch(session, batch_key)
    return fail_and_retry(session, batch, reason=f"lease expired: run {batch.run_id} of the batch is gone", now=now,
                          max_attempts=max_attempts, claim_ttl_s=claim_ttl_s, run_id=batch.run_id)
