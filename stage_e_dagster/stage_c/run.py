"""Stage C's entry point: bring the evidence of the given cards (or the whole backlog) up to date.

Per card: skip it when its present image already has current evidence; otherwise fetch once, run
only the stale extractors, and persist in one transaction. Knows nothing of Dagster or batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.models import Card, ImageEvidence
from ..envelope.fetch_window import record_fetch_outcome
from .backlog import backlog_page, cards_by_id
from .compute import ExtractionResult, compute_evidence, locator_key, sha256_hex, terminal_result
from .current import satisfies_stage_c
from .fetch import FetchLockout, FetchResult, ImageFetcher
from .lexicon import known_set_codes
from .manifest import stale_extractors
from .persist import count_transient_failure, persist_evidence

log = logging.getLogger(__name__)

DEFAULT_RETRY_BUDGET = 3
PAGE_SIZE = 200


@dataclass(frozen=True)
class LockoutInfo:
    host: str
    status_code: int
    card_id: int
    locator: str
    at: datetime


@dataclass
class StageCReport:
    attempted: int = 0
    completed: int = 0
    skipped_current: int = 0
    fetch_failures: int = 0
    throttled: int = 0
    terminal: int = 0
    lockout: LockoutInfo | None = None
    deferred_card_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _CardView:
    """What Stage C reads of a card before fetching: a snapshot detached from any session."""

    id: int
    locator: str
    content_hash: str | None
    declared_hash: str | None

    @property
    def known_hash(self) -> str | None:
        return self.content_hash or self.declared_hash


def _view(card: Card) -> _CardView:
    return _CardView(card.id, card.image_locator, card.content_hash, card.declared_content_hash)


def _iter_cards(engine: sa.Engine, card_ids: Sequence[int] | None) -> Iterator[_CardView]:
    if card_ids is not None:
        for start in range(0, len(card_ids), PAGE_SIZE):
            chunk = list(card_ids[start:start + PAGE_SIZE])
            with Session(engine) as session:
                found = cards_by_id(session, chunk)
                views = [_view(found[i]) for i in chunk if i in found]
            yield from views
        return
    after = 0
    while True:
        with Session(engine) as session:
            page = [_view(c) for c in backlog_page(session, after, PAGE_SIZE)]
        if not page:
            return
        yield from page
        after = page[-1].id


def _evidence_row(session: Session, card_id: int, content_hash: str) -> ImageEvidence | None:
    return session.execute(
        sa.select(ImageEvidence).where(ImageEvidence.card_id == card_id, ImageEvidence.content_hash == content_hash)
    ).scalar_one_or_none()


def _settle_current(session: Session, view: _CardView, writer: str) -> None:
    """The present image already has current evidence: make sure the card says so, fetching nothing."""
    changed = view.content_hash != view.known_hash
    values: dict[str, object] = {"stage_c_pending": False, "content_hash": view.known_hash}
    if changed:
        values.update(stage_d_pending=True, evidence_writer=writer, updated_at=utcnow())
    session.execute(
        sa.update(Card)
        .where(Card.id == view.id, Card.stage_c_pending.is_(True),
               Card.content_hash.is_not_distinct_from(view.content_hash))
        .values(**values)
    )


def run_stage_c(engine: sa.Engine, card_ids: Sequence[int] | None, *, writer: str, run_id: str | None,
                fetcher: ImageFetcher, lexicon: frozenset[str] | None = None, limit: int | None = None,
                progress: Callable[[int], None] | None = None, should_stop: Callable[[], bool] | None = None,
                retry_budget: int = DEFAULT_RETRY_BUDGET) -> StageCReport:
    """Bring the evidence of ``card_ids`` (None: the whole Stage C backlog, by id) up to date.

    Ordinary per-card failures are counted and recorded, never raised. A 403 from an image host
    records a lockout outcome and stops at once; the report carries it and every card not
    reached is listed as deferred (for an explicit ``card_ids`` list; in BULK mode they simply
    stay in the backlog).
    """
    if lexicon is None:
        lexicon = known_set_codes(engine)
    report = StageCReport()
    cards = _iter_cards(engine, card_ids)
    stopped = False
    for view in cards:
        if limit is not None and report.attempted >= limit:
            break
        if should_stop is not None and should_stop():
            report.deferred_card_ids.append(view.id)
            stopped = True
            break
        report.attempted += 1
        try:
            _process_card(engine, view, report, writer=writer, run_id=run_id, fetcher=fetcher, lexicon=lexicon,
                          retry_budget=retry_budget)
        finally:
            if progress is not None:
                progress(1)
        if report.lockout is not None:
            break
    if (report.lockout is not None or stopped) and card_ids is not None:
        report.deferred_card_ids.extend(view.id for view in cards)
    return report


def _process_card(engine: sa.Engine, view: _CardView, report: StageCReport, *, writer: str, run_id: str | None,
                  fetcher: ImageFetcher, lexicon: frozenset[str], retry_budget: int) -> None:
    keys: list[str] | None = None
    if view.known_hash is not None:
        with session_scope(engine) as session:
            row = _evidence_row(session, view.id, view.known_hash)
            if satisfies_stage_c(row):
                _settle_current(session, view, writer)
                report.skipped_current += 1
                return
            keys = stale_extractors(row.extractor_versions) if row is not None else None

    try:
        fetched = fetcher.fetch(view.locator)
    except FetchLockout as exc:
        with session_scope(engine) as session:
            record_fetch_outcome(session, "lockout", status_code=exc.status_code, host=exc.host, card_id=view.id,
                                 run_id=run_id)
        report.lockout = LockoutInfo(exc.host, exc.status_code, view.id, view.locator, utcnow())
        report.deferred_card_ids.append(view.id)
        log.warning("stage C stopped: %s", exc)
        return

    if fetched.outcome == "throttled":
        with session_scope(engine) as session:
            record_fetch_outcome(session, "throttled", status_code=fetched.status_code, host=fetched.host,
                                 card_id=view.id, run_id=run_id)
        report.throttled += 1
        report.deferred_card_ids.append(view.id)
        return

    if fetched.outcome == "failed":
        _persist_failed_fetch(engine, view, fetched, report, writer=writer, run_id=run_id, retry_budget=retry_budget,
                              keys=keys)
        return

    assert fetched.data is not None
    content_hash = sha256_hex(fetched.data)
    if content_hash != view.known_hash:
        with Session(engine) as session:
            row = _evidence_row(session, view.id, content_hash)
        if satisfies_stage_c(row):
            with session_scope(engine) as session:
                record_fetch_outcome(session, "ok", status_code=fetched.status_code, host=fetched.host,
                                     card_id=view.id, run_id=run_id)
                _settle_current(session, _CardView(view.id, view.locator, view.content_hash, content_hash), writer)
            report.skipped_current += 1
            return
        keys = stale_extractors(row.extractor_versions) if row is not None else None
    result = compute_evidence(content_hash, fetched.data, latency_ms=fetched.latency_ms, keys=keys, lexicon=lexicon)
    outcome = "failed" if result.terminal else "ok"
    with session_scope(engine) as session:
        record_fetch_outcome(session, outcome, status_code=fetched.status_code, host=fetched.host, card_id=view.id,
                             run_id=run_id)
        persist_evidence(session, view.id, result, writer=writer, run_id=run_id, seen_hash=view.content_hash,
                         seen_locator=view.locator)
    report.completed += 1
    if result.terminal:
        report.fetch_failures += 1
        report.terminal += 1


def _persist_failed_fetch(engine: sa.Engine, view: _CardView, fetched: FetchResult, report: StageCReport, *,
                          writer: str, run_id: str | None, retry_budget: int, keys: list[str] | None) -> None:
    """Count the failure; once it is permanent (or the retry budget is spent) persist a terminal
    record. A re-extraction (``keys`` = the stale ones) marks only those keys, keeping stored values."""
    report.fetch_failures += 1
    assert fetched.error_class is not None
    with session_scope(engine) as session:
        record_fetch_outcome(session, "failed", status_code=fetched.status_code, host=fetched.host,
                             card_id=view.id, run_id=run_id)
        if fetched.transient and count_transient_failure(session, view.id) < retry_budget:
            return  # stays in the backlog for a later attempt
        content_hash = view.known_hash or locator_key(view.locator)
        result: ExtractionResult = terminal_result(content_hash, fetched.error_class, latency_ms=fetched.latency_ms,
                                                   keys=keys)
        persist_evidence(session, view.id, result, writer=writer, run_id=run_id, seen_hash=view.content_hash,
                         seen_locator=view.locator)
    report.completed += 1
    report.terminal += 1
