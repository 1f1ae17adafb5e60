"""Persist one card's evidence in one transaction: an upsert on (card, content hash) that merges
the version map, plus the card's state flags (and its backoff when it has to wait).

The evidence row is written with INSERT ... ON CONFLICT so two processes persisting the same card
at once leave exactly one row and no integrity error.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ..catalog.base import utcnow
from ..catalog.models import Card, ImageEvidence
from .compute import ExtractionResult

# A throttled card waits THROTTLE_BASE_S, doubling with each throttle in a row, at most
# THROTTLE_CAP_S, jittered down to half so cards throttled together do not return together. The
# streak starts over once the host has answered anyone cleanly since the card's last wait: the
# host's slowing is the shared pacer's job. A longer Retry-After wins, up to RETRY_AFTER_CAP_S.
THROTTLE_BASE_S = 5.0
THROTTLE_CAP_S = 120.0
RETRY_AFTER_CAP_S = 6 * 3600.0
# A card whose fetch succeeded or ended in a terminal record owes no wait any more.
BACKOFF_CLEARED: dict[str, Any] = {
    "throttle_count": 0, "next_eligible_at": None, "config_refused_under": None, "config_refused_setting": None,
}


def _merge(dialect: str, stored: Any, patch: dict[str, Any]) -> Any:
    """``stored`` JSON object merged with ``patch``; keys patched to null are removed."""
    text = json.dumps(patch, sort_keys=True)
    if dialect == "sqlite":
        return sa.func.json_patch(sa.func.coalesce(stored, "{}"), text)
    merged = sa.func.coalesce(sa.cast(stored, postgresql.JSONB), sa.text("'{}'::jsonb")).op("||")(
        sa.cast(sa.literal(text), postgresql.JSONB)
    )
    return sa.cast(sa.func.jsonb_strip_nulls(merged), sa.JSON)


def upsert_evidence(session: Session, card_id: int, result: ExtractionResult, *, writer: str,
                    run_id: str | None) -> None:
    """Insert the row for (card, content hash) or merge this pass into it."""
    dialect = session.get_bind().dialect.name
    now = utcnow()
    clean_skips = {k: v for k, v in result.skip_reasons.items() if v is not None}
    values: dict[str, Any] = {
        "card_id": card_id, "content_hash": result.content_hash, "extractor_versions": result.extractor_versions,
        "skip_reasons": clean_skips, "terminal": result.terminal, "writer": writer, "run_id": run_id,
        "created_at": now, "updated_at": now, **result.fields,
    }
    insert = (sqlite.insert if dialect == "sqlite" else postgresql.insert)(ImageEvidence).values(**values)
    table = ImageEvidence.__table__
    updates: dict[str, Any] = {name: insert.excluded[name] for name in result.fields}
    updates.update(
        extractor_versions=_merge(dialect, table.c.extractor_versions, result.extractor_versions),
        skip_reasons=_merge(dialect, table.c.skip_reasons, result.skip_reasons),
        terminal=insert.excluded.terminal,
        writer=insert.excluded.writer,
        run_id=insert.excluded.run_id,
        updated_at=insert.excluded.updated_at,
    )
    session.execute(insert.on_conflict_do_update(index_elements=["card_id", "content_hash"], set_=updates))


def mark_card_done(session: Session, card_id: int, *, content_hash: str, writer: str,
                   seen_hash: str | None, seen_locator: str) -> bool:
    """Point the card at its evidence and take it out of the Stage C backlog.

    Conditional on the card still showing the image we read: if a writer changed it meanwhile
    the card stays in the backlog. Returns whether the card was updated.
    """
    result = session.execute(
        sa.update(Card)
        .where(Card.id == card_id, Card.content_hash.is_not_distinct_from(seen_hash),
               Card.image_locator == seen_locator)
        .values(content_hash=content_hash, stage_c_pending=False, stage_d_pending=True,
                evidence_writer=writer, stage_c_attempts=0, updated_at=utcnow(), **BACKOFF_CLEARED)
    )
    return bool(result.rowcount)


def persist_evidence(session: Session, card_id: int, result: ExtractionResult, *, writer: str,
                     run_id: str | None, seen_hash: str | None, seen_locator: str) -> bool:
    """Upsert the evidence row and update the card, in the caller's (one per card) transaction."""
    upsert_evidence(session, card_id, result, writer=writer, run_id=run_id)
    return mark_card_done(session, card_id, content_hash=result.content_hash, writer=writer,
                          seen_hash=seen_hash, seen_locator=seen_locator)


def count_transient_failure(session: Session, card_id: int) -> int:
    """One more transient fetch failure for the card's present image; returns the new count."""
    session.execute(
        sa.update(Card).where(Card.id == card_id).values(stage_c_attempts=Card.stage_c_attempts + 1)
    )
    return int(session.execute(sa.select(Card.stage_c_attempts).where(Card.id == card_id)).scalar_one())


def throttle_delay_s(streak: int, retry_after_s: float | None = None, *, rng: random.Random | None = None) -> float:
    """How long a card waits after the ``streak``-th throttle in a row (1 = the first): jittered, bounded."""
    full = min(THROTTLE_BASE_S * 2.0 ** max(streak - 1, 0), THROTTLE_CAP_S)
    delay = full * (rng or random).uniform(0.5, 1.0)
    if retry_after_s is not None and retry_after_s > delay:
        delay = min(retry_after_s, RETRY_AFTER_CAP_S)
    return delay


def defer_card(session: Session, card_id: int, *, seen_locator: str, now: datetime,
               retry_after_s: float | None = None, host_answered_at: datetime | None = None) -> datetime | None:
    """Keep a throttled card out of every batch for a short while; returns when it is eligible again.

    Counts the throttle in the card's streak (``throttle_count``), which starts over when the host
    answered anyone cleanly (``host_answered_at``) after the card's last wait ended. Does nothing
    (returns None) when a writer has pointed the card at another image since we read it.
    """
    row = session.execute(
        sa.select(Card.throttle_count, Card.next_eligible_at)
        .where(Card.id == card_id, Card.image_locator == seen_locator)
    ).one_or_none()
    if row is None:
        return None
    count, waited_until = row
    served_since = host_answered_at is not None and (waited_until is None or host_answered_at > waited_until)
    streak = 1 if served_since else int(count) + 1
    until = now + timedelta(seconds=throttle_delay_s(streak, retry_after_s))
    session.execute(
        sa.update(Card)
        .where(Card.id == card_id)
        .values(throttle_count=streak, next_eligible_at=until, updated_at=Card.updated_at)  # not a change of the card
    )
    return until


def wait_on_configuration(session: Session, card_id: int, *, seen_locator: str, fingerprint: str,
                          setting: str) -> bool:
    """The settings refuse the card's locator: take it out of the Stage C backlog until they change.

    Marked with the allow-list ``fingerprint`` it was refused under and the ``setting`` to change; no
    timer. Does nothing (False) when a writer has pointed the card at another image since we read it.
    """
    return bool(
        session.execute(
            sa.update(Card)
            .where(Card.id == card_id, Card.image_locator == seen_locator)
            .values(stage_c_pending=False, config_refused_under=fingerprint, config_refused_setting=setting,
                    next_eligible_at=None, updated_at=Card.updated_at)  # not a change of the card
        ).rowcount
    )
