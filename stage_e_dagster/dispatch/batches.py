"""Micro-batches: choosing cards (seeds first, then the backlog), recording the batch, retrying it.

A batch row and its claims are committed before any run is requested, so a sensor tick that
fails afterwards loses nothing: the next tick finds the pending batch and requests it again
under the same run key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from ..catalog.base import utcnow
from ..catalog.models import Card, MicroBatch, ScanLog
from ..catalog.models.dispatch import PARKED_KEY
from .claims import claim_cards, release_claims, transfer_claims, unclaimed_card_ids
from .keys import new_batch_key, retry_key
from .sizing import BatchPlan

DISPATCH_WRITER_PREFIX = "dispatch:"
DISPATCH_AGENT = "stage-e-dispatch"
PARK_FOR = timedelta(hours=24)
IN_FLIGHT = ("pending", "running")
EVERY_CARD_TAKEN = "every card was taken by another batch"


def dispatch_writer(run_id: str) -> str:
    return f"{DISPATCH_WRITER_PREFIX}{run_id}"


@dataclass(frozen=True)
class NewBatches:
    batches: list[MicroBatch]
    highest_seed_id: int | None


def record_batch(
    session: Session,
    card_ids: Sequence[int],
    *,
    trigger_reason: str,
    now: datetime,
    claim_ttl_s: int,
    attempt: int = 1,
    retry_of: str | None = None,
    key: str | None = None,
    requested: bool = True,
) -> MicroBatch | None:
    """Claim the cards and record the batch; ``None`` when another selector claimed them all first.

    ``requested``: the caller requests its run now (a sensor tick, a sweep); a retry is recorded
    unrequested and the reconciling tick requests it."""
    key = key or new_batch_key(now, card_ids)
    claimed = claim_cards(session, card_ids, batch_key=key, expires_at=now + timedelta(seconds=claim_ttl_s), now=now)
    if not claimed:
        return None
    batch = MicroBatch(
        batch_key=key,
        card_ids=claimed,
        trigger_reason=trigger_reason,
        attempt=attempt,
        retry_of=retry_of,
        status="pending",
        created_at=now,
        lease_expires_at=now + timedelta(seconds=claim_ttl_s),
        requested_at=now if requested else None,
        request_count=1 if requested else 0,
    )
    session.add(batch)
    session.flush()
    return batch


def create_batches(
    session: Session,
    predicate: sa.ColumnElement[bool],
    plan: BatchPlan,
    *,
    trigger_reason: str,
    now: datetime,
    claim_ttl_s: int,
    seeds_after: int | None = None,
) -> NewBatches:
    """Fill up to ``plan.max_batches`` batches: cards above ``seeds_after`` first, then the backlog by id.

    The cards are dealt out in turn (card i to batch i mod n), not cut into runs of ids: what a card
    costs follows its id (cards added together look alike), so two batches cut from one backlog end
    seconds apart while one slot idles; dealt, they end together. As many batches as before."""
    wanted = plan.batch_size * plan.max_batches
    ids: list[int] = []
    highest_seed: int | None = None
    if seeds_after is not None:
        ids = unclaimed_card_ids(session, predicate, now=now, limit=wanted, after_id=seeds_after)
        if ids:
            highest_seed = max(ids)
    ids += unclaimed_card_ids(session, predicate, now=now, limit=wanted - len(ids), exclude=ids)
    count = math.ceil(len(ids) / plan.batch_size)
    batches: list[MicroBatch] = []
    for turn in range(count):
        batch = record_batch(session, ids[turn::count], trigger_reason=trigger_reason, now=now,
                             claim_ttl_s=claim_ttl_s)
        if batch is not None:
            batches.append(batch)
    return NewBatches(batches=batches, highest_seed_id=highest_seed)


def get_batch(session: Session, batch_key: str) -> MicroBatch:
    batch = session.get(MicroBatch, batch_key)
    if batch is None:
        raise LookupError(f"no micro-batch {batch_key!r} in the catalogue")
    return batch


def _set_status(
    session: Session,
    batch_key: str,
    *,
    to: str | sa.ColumnElement[str],
    when: Sequence[str],
    held_by: str | None = None,
    **values: object,
) -> bool:
    """Compare-and-set on the batch row: move it to ``to`` only from a status in ``when`` (and, given
    ``held_by``, only while that run holds it). Two evaluators racing: exactly one gets ``True``."""
    query = sa.update(MicroBatch).where(MicroBatch.batch_key == batch_key, MicroBatch.status.in_(list(when)))
    if held_by is not None:
        query = query.where(MicroBatch.run_id == held_by)
    result = session.execute(query.values(status=to, **values).execution_options(synchronize_session=False))
    return bool(result.rowcount)


def take_batch(session: Session, batch_key: str, *, run_id: str, now: datetime, lease_until: datetime) -> bool:
    """pending -> running for exactly one run: a second run of the same batch gets ``False`` and must not fetch."""
    taken = _set_status(
        session,
        batch_key,
        to="running",
        when=("pending",),
        run_id=run_id,
        started_at=now,
        lease_expires_at=lease_until,
    )
    if not taken:
        return False
    if not _shrink_to_held(session, batch_key, expires_at=lease_until, now=now):
        abandon(session, batch_key, reason=EVERY_CARD_TAKEN, now=now, run_id=run_id)
        return False
    return True


def split_tail(
    session: Session, batch_key: str, *, run_id: str, tail: Sequence[int], now: datetime, claim_ttl_s: int
) -> MicroBatch | None:
    """Move ``tail``, the last cards of a running batch that its run has not started, to a new pending
    batch, unrequested: the next reconciling tick requests it for a slot that would otherwise idle.

    Only the run that holds the batch splits it, under the batch row's lock (``FOR UPDATE``; SQLite's
    write lock is held from the transaction's start) and a compare-and-set on (running, ``run_id``);
    the claims move with the cards, so no other selector can take them between the two batches. The
    new batch keeps the trigger and the attempt (a card that crashes runs still parks on time).
    ``None`` when the run no longer holds the batch, or none of ``tail`` is in it while some cards stay."""
    batch = session.get(MicroBatch, batch_key, with_for_update=True, populate_existing=True)
    if batch is None or batch.status != "running" or batch.run_id != run_id:
        return None
    held = set(batch.card_ids)
    moving = [card_id for card_id in tail if card_id in held]
    if not moving or len(moving) == len(held):
        return None
    leaving, trigger, attempt = set(moving), batch.trigger_reason, batch.attempt
    if not _set_status(session, batch_key, to="running", when=("running",), held_by=run_id,
                       card_ids=[card_id for card_id in batch.card_ids if card_id not in leaving]):
        return None
    key = new_batch_key(now, moving)
    transfer_claims(session, from_key=batch_key, to_key=key, expires_at=now + timedelta(seconds=claim_ttl_s),
                    card_ids=moving)
    session.expire(batch)
    return record_batch(session, moving, trigger_reason=trigger, now=now, claim_ttl_s=claim_ttl_s, attempt=attempt,
                        key=key, requested=False)


def record_stage_c_end(
    session: Session, batch_key: str, *, run_id: str, cards_done: int, stopped_by_trip: str | None
) -> bool:
    """What Stage C did with the batch, while ``run_id`` holds it: the cards it finished, and the trip
    that stopped it before every card (if one did)."""
    return bool(
        session.execute(
            sa.update(MicroBatch)
            .where(MicroBatch.batch_key == batch_key, MicroBatch.status == "running", MicroBatch.run_id == run_id)
            .values(cards_done=cards_done, stopped_by_trip=stopped_by_trip)
            .execution_options(synchronize_session=False)
        ).rowcount
    )


def mark_succeeded(
    session: Session, batch: MicroBatch, *, now: datetime, peak_rss_mb: float | None, run_id: str | None = None
) -> bool:
    """running -> succeeded (or ``stopped``, when a trip stopped its Stage C early) for the run that
    holds the batch; releases its claims."""
    done = _set_status(
        session,
        batch.batch_key,
        to=sa.case((MicroBatch.stopped_by_trip.is_(None), "succeeded"), else_="stopped"),
        when=("running",),
        held_by=run_id or batch.run_id,
        finished_at=now,
        peak_rss_mb=peak_rss_mb,
    )
    if done:
        release_claims(session, batch.batch_key)
    return done


def lease_renewal_due(batch: MicroBatch, *, until: datetime, now: datetime) -> bool:
    """Whether :func:`renew_lease` to ``until`` would renew the batch as read: a tick skips the write
    transaction for a batch whose lease has more than half of its life left."""
    return batch.lease_expires_at is None or batch.lease_expires_at < _half_life(until, now)


def _half_life(until: datetime, now: datetime) -> datetime:
    return now + (until - now) / 2


def renew_lease(session: Session, batch_key: str, *, until: datetime, now: datetime | None = None) -> None:
    """The batch is waiting or running under a live run: once less than half of a lease to ``until``
    is left, push its lease and its claims to ``until`` and shrink it to the cards it still holds (a
    card another batch claimed meanwhile is that batch's).

    At half-life, not every tick: a drain's ticks would otherwise rewrite every claim of every batch
    in flight each pass, and a run's lease (its whole maximum runtime) would be cut to ``until``.
    While more than half is left its claims, which last as long, keep the cards from any other
    batch, so there is nothing to shrink. A compare-and-set on the lease: two evaluators renew once."""
    now = now or utcnow()
    half_life = _half_life(until, now)
    renewed = session.execute(
        sa.update(MicroBatch)
        .where(
            MicroBatch.batch_key == batch_key,
            MicroBatch.status.in_(IN_FLIGHT),
            sa.or_(MicroBatch.lease_expires_at.is_(None), MicroBatch.lease_expires_at < half_life),
        )
        .values(lease_expires_at=until)
        .execution_options(synchronize_session=False)
    ).rowcount
    if renewed:
        _shrink_to_held(session, batch_key, expires_at=until, now=now)


def _shrink_to_held(session: Session, batch_key: str, *, expires_at: datetime, now: datetime) -> list[int]:
    """Re-take the batch's claims (its own, or expired ones nobody took) until ``expires_at`` and drop
    from ``card_ids`` every card another batch holds now; returns the cards it holds."""
    batch = session.get(MicroBatch, batch_key, populate_existing=True)
    assert batch is not None
    held = claim_cards(session, batch.card_ids, batch_key=batch_key, expires_at=expires_at, now=now)
    if held and held != sorted(batch.card_ids):
        batch.card_ids = held
        session.flush()
    return held


def request_again(session: Session, seen: MicroBatch, *, now: datetime, claim_ttl_s: int) -> MicroBatch | None:
    """Prepare a pending batch for a new run request: re-take its claims and shrink it to what it holds.

    ``seen`` is the row as the caller read it when it decided to request; the request is a
    compare-and-set on that view's ``request_count``, so of two evaluators that saw the same row only
    one requests the batch (``None`` for the other). The claims re-taken are its own or expired ones,
    so a card another batch took meanwhile leaves this one; a batch left with no card is abandoned.
    """
    until = now + timedelta(seconds=claim_ttl_s)
    won = session.execute(
        sa.update(MicroBatch)
        .where(
            MicroBatch.batch_key == seen.batch_key,
            MicroBatch.status == "pending",
            MicroBatch.request_count == seen.request_count,
        )
        .values(requested_at=now, lease_expires_at=until, request_count=seen.request_count + 1)
        .execution_options(synchronize_session=False)
    ).rowcount
    if not won:
        return None
    if not _shrink_to_held(session, seen.batch_key, expires_at=until, now=now):
        abandon(session, seen.batch_key, reason=EVERY_CARD_TAKEN, now=now)
        return None
    return session.get(MicroBatch, seen.batch_key)


def forget_request(session: Session, batch_key: str, *, made_before: datetime) -> bool:
    """The batch's last request came to nothing (its run failed before taking it): clear the request
    so the next reconcile requests the batch again at once. A compare-and-set on a pending batch
    whose last request is older than the failed run, so a newer request is never forgotten."""
    return bool(
        session.execute(
            sa.update(MicroBatch)
            .where(
                MicroBatch.batch_key == batch_key,
                MicroBatch.status == "pending",
                MicroBatch.requested_at <= made_before,
            )
            .values(requested_at=None)
            .execution_options(synchronize_session=False)
        ).rowcount
    )


def still_pending(session: Session, card_ids: Sequence[int]) -> list[int]:
    if not card_ids:
        return []
    return list(
        session.execute(
            sa.select(Card.id)
            .where(Card.id.in_(list(card_ids)), sa.or_(STAGE_C_PENDING, STAGE_D_PENDING))
            .order_by(Card.id)
        ).scalars()
    )


@dataclass(frozen=True)
class Failed:
    """What :func:`fail_and_retry` did: ``recorded`` is False when another evaluator settled the batch first."""

    recorded: bool
    retry: MicroBatch | None = None


def fail_and_retry(
    session: Session,
    batch: MicroBatch,
    *,
    reason: str,
    now: datetime,
    max_attempts: int,
    claim_ttl_s: int,
    run_id: str | None = None,
) -> Failed:
    """Mark an in-flight batch failed (compare-and-set) and queue a retry of its unfinished cards under a new key.

    After ``max_attempts`` the cards are parked for a day (their claims move to ``parked``) and each
    gets a scan-log entry saying why, so a card that crashes every run cannot loop. Given ``run_id``,
    only a running batch that run holds is failed; without, only a pending one (a run that failed
    before taking it).
    """
    if not _set_status(
        session,
        batch.batch_key,
        to="failed",
        when=("running",) if run_id else ("pending",),
        held_by=run_id,
        failure_reason=reason[:4000],
        finished_at=now,
    ):
        return Failed(recorded=False)
    session.refresh(batch)
    remaining = still_pending(session, batch.card_ids)
    if not remaining:
        release_claims(session, batch.batch_key)
        return Failed(recorded=True)
    if batch.attempt >= max_attempts:
        # Only the unfinished cards are parked: a finished card owes nothing, and a claim left on it
        # would keep it out of the backlog for a day if its image changed meanwhile.
        transfer_claims(session, from_key=batch.batch_key, to_key=PARKED_KEY, expires_at=now + PARK_FOR,
                        card_ids=remaining)
        release_claims(session, batch.batch_key)
        session.add_all(
            ScanLog(
                card_id=cid,
                agent_id=DISPATCH_AGENT,
                run_id=batch.run_id,
                reason="dispatch-attempts-exhausted",
                detail={"batch_key": batch.batch_key, "attempts": batch.attempt, "last_failure": reason[:500]},
            )
            for cid in remaining
        )
        return Failed(recorded=True)
    release_claims(session, batch.batch_key)
    retry = record_batch(
        session,
        remaining,
        trigger_reason=batch.trigger_reason,
        now=now,
        claim_ttl_s=claim_ttl_s,
        attempt=batch.attempt + 1,
        retry_of=batch.batch_key,
        key=retry_key(batch.batch_key, batch.attempt + 1),
        requested=False,
    )
    return Failed(recorded=True, retry=retry)


def abandon(session: Session, batch_key: str, *, reason: str, now: datetime, run_id: str | None = None) -> bool:
    """Drop a batch without spending an attempt (its run was refused, or cancelled): its cards go back to
    the backlog. Without ``run_id`` only a pending batch; with it, the running batch that run held (a
    person cancelled it). Returns whether this call did it."""
    when = ("running",) if run_id else ("pending",)
    if not _set_status(
        session, batch_key, to="abandoned", when=when, held_by=run_id, failure_reason=reason, finished_at=now
    ):
        return False
    release_claims(session, batch_key)
    return True


def still_held(session: Session, batch_key: str, *, run_id: str, now: datetime) -> bool:
    """Whether run ``run_id`` still holds the batch (running, under its run id), stamping its progress
    if so: one conditional update, the per-card check of a run and its sign of life to the run-end
    handling. ``False`` once another evaluator failed, retried or abandoned the batch."""
    return bool(
        session.execute(
            sa.update(MicroBatch)
            .where(MicroBatch.batch_key == batch_key, MicroBatch.run_id == run_id, MicroBatch.status == "running")
            .values(progress_at=now)
            .execution_options(synchronize_session=False)
        ).rowcount
    )
