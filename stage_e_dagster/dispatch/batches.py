"""Micro-batches: choosing cards (seeds first, then the backlog), recording the batch, retrying it.

A batch row and its claims are committed before any run is requested, so a sensor tick that
fails afterwards loses nothing: the next tick finds the pending batch and requests it again
under the same run key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from ..catalog.models import Card, MicroBatch, ScanLog
from .claims import claim_cards, extend_claims, release_claims, transfer_claims, unclaimed_card_ids
from .keys import new_batch_key, retry_key
from .sizing import BatchPlan

DISPATCH_WRITER_PREFIX = "dispatch:"
DISPATCH_AGENT = "stage-e-dispatch"
PARKED_KEY = "parked"
PARK_FOR = timedelta(hours=24)
IN_FLIGHT = ("pending", "running")

# Evidence written by anyone but the dispatcher sends its card back through Stage D.
EXTERNAL_EVIDENCE_CHANGED = sa.and_(
    STAGE_D_PENDING,
    sa.or_(Card.evidence_writer.is_(None), sa.not_(Card.evidence_writer.like(DISPATCH_WRITER_PREFIX + "%"))),
)


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
) -> MicroBatch | None:
    """Claim the cards and record the batch; ``None`` when another selector claimed them all first."""
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
    """Fill up to ``plan.max_batches`` batches: cards above ``seeds_after`` first, then the backlog by id."""
    batches: list[MicroBatch] = []
    highest_seed: int | None = None
    for _ in range(plan.max_batches):
        ids: list[int] = []
        if seeds_after is not None:
            ids = unclaimed_card_ids(session, predicate, now=now, limit=plan.batch_size, after_id=seeds_after)
            if ids:
                highest_seed = max(ids)
        ids += unclaimed_card_ids(session, predicate, now=now, limit=plan.batch_size - len(ids), exclude=ids)
        if not ids:
            break
        batch = record_batch(session, ids, trigger_reason=trigger_reason, now=now, claim_ttl_s=claim_ttl_s)
        if batch is None:
            break
        batches.append(batch)
    return NewBatches(batches=batches, highest_seed_id=highest_seed)


def get_batch(session: Session, batch_key: str) -> MicroBatch:
    batch = session.get(MicroBatch, batch_key)
    if batch is None:
        raise LookupError(f"no micro-batch {batch_key!r} in the catalogue")
    return batch


def mark_running(session: Session, batch: MicroBatch, *, run_id: str, claims_until: datetime) -> None:
    batch.status = "running"
    batch.run_id = run_id
    extend_claims(session, batch.batch_key, expires_at=claims_until)


def mark_succeeded(session: Session, batch: MicroBatch, *, now: datetime, peak_rss_mb: float | None) -> None:
    batch.status = "succeeded"
    batch.finished_at = now
    batch.peak_rss_mb = peak_rss_mb
    release_claims(session, batch.batch_key)


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


def fail_and_retry(
    session: Session,
    batch: MicroBatch,
    *,
    reason: str,
    now: datetime,
    max_attempts: int,
    claim_ttl_s: int,
) -> MicroBatch | None:
    """Mark a batch failed and queue a retry of its unfinished cards under a new key.

    After ``max_attempts`` the cards are parked for a day (their claims move to ``parked``) and each
    gets a scan-log entry saying why, so a card that crashes every run cannot loop.
    """
    batch.status = "failed" if batch.status != "abandoned" else batch.status
    batch.failure_reason = batch.failure_reason or reason
    batch.finished_at = batch.finished_at or now
    remaining = still_pending(session, batch.card_ids)
    if not remaining:
        release_claims(session, batch.batch_key)
        return None
    if batch.attempt >= max_attempts:
        transfer_claims(session, from_key=batch.batch_key, to_key=PARKED_KEY, expires_at=now + PARK_FOR)
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
        return None
    release_claims(session, batch.batch_key)
    return record_batch(
        session,
        remaining,
        trigger_reason=batch.trigger_reason,
        now=now,
        claim_ttl_s=claim_ttl_s,
        attempt=batch.attempt + 1,
        retry_of=batch.batch_key,
        key=retry_key(batch.batch_key, batch.attempt + 1),
    )


def abandon(session: Session, batch: MicroBatch, *, reason: str, now: datetime) -> None:
    """Drop a batch that never ran (its queued run was cancelled): its cards go back to the backlog."""
    batch.status = "abandoned"
    batch.failure_reason = reason
    batch.finished_at = now
    release_claims(session, batch.batch_key)
