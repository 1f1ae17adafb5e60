"""Stage C's entry point: bring the evidence of the given cards (or the whole backlog) up to date.

Per card: skip it when its present image already has current evidence; otherwise fetch once, run
only the stale extractors, and persist in one transaction. Knows nothing of Dagster or batches.

Whose problem a fetch was decides what is left behind: the host's trouble (``failed``) counts in
the fetch window; the upload's own (``rejected``: corrupt, truncated, empty, oversized, missing)
is a terminal record and does not count; a throttle leaves no record and keeps the card in the
backlog behind a short wait; a refusal by the settings leaves no record and takes the card out of
the backlog, waiting on configuration, until the settings change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, Protocol, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.models import Card, ImageEvidence
from ..catalog.printed_keys import PrintedKeys, printed_keys
from ..envelope.fetch_window import record_fetch_outcome
from . import pacer
from .backlog import backlog_page, cards_by_id, leased_elsewhere
from .compute import ExtractionResult, compute_evidence, locator_key, sha256_hex, terminal_result
from .current import satisfies_stage_c
from .fetch import CONFIG_REFUSED, FAILED, REJECTED, THROTTLED, FetchLockout, FetchResult, ImageFetcher
from .lexicon import known_set_codes
from .manifest import stale_extractors
from .persist import BACKOFF_CLEARED, count_transient_failure, defer_card, persist_evidence, wait_on_configuration
from .prefetch import FetchAhead

log = logging.getLogger(__name__)

DEFAULT_RETRY_BUDGET = 3
PAGE_SIZE = 200
# Cards whose bytes are fetched ahead while the current card computes (the most a stop wastes).
FETCH_AHEAD = 2

# Told of every card that did not simply complete: (card id, outcome, what happened in a phrase). The
# outcome is the fetch's (``failed``, ``rejected``, ``throttled``, ``config-refused``, ``lockout``), or
# ``extractor-error`` for a card read whose extractor raised (the phrase ends with the traceback).
CardNote = Callable[[int, str, str], None]


class TailHandOff(Protocol):
    """A running batch handing the tail of its cards to another batch (``dispatch/tail.py``)."""

    def gone(self, card_id: int, taken: Sequence[int]) -> bool:
        """Asked before each card with the cards taken so far (it and those fetching ahead, which stay);
        may hand cards after them to another batch; says whether this card went."""

    def moved(self, card_id: int) -> bool:
        """Whether the card went to another batch: the fetch-ahead takes no such card."""
EXTRACTOR_ERROR = "extractor-error"


def _ignore(card_id: int, outcome: str, detail: str) -> None:
    pass


@dataclass(frozen=True)
class LockoutInfo:
    host: str
    status_code: int
    card_id: int
    locator: str
    at: datetime


@dataclass
class StageCReport:
    """What one pass did. ``fetch_failures`` are the host's (they count in the fetch window);
    ``rejected`` uploads and ``config_refused`` locators are not failures; ``terminal`` counts every
    terminal record written (rejected uploads and permanent host failures); ``not_yet_eligible``
    cards were skipped unfetched because their backoff has not passed; ``claimed_elsewhere`` cards
    were skipped because a live lease (a dispatch batch in flight) holds them; ``extractor_errors``
    cards were read and are done, but an extractor raised on them (recorded as ``extractor-error``)."""

    attempted: int = 0
    completed: int = 0
    skipped_current: int = 0
    fetch_failures: int = 0
    throttled: int = 0
    terminal: int = 0
    rejected: int = 0
    config_refused: int = 0
    not_yet_eligible: int = 0
    claimed_elsewhere: int = 0
    extractor_errors: int = 0  # cards read (and done) with at least one extractor that raised
    stopped: bool = False  # ``should_stop`` said stop before every card was reached
    lockout: LockoutInfo | None = None
    deferred_card_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _CardView:
    """What Stage C reads of a card before fetching: a snapshot detached from any session."""

    id: int
    locator: str
    content_hash: str | None
    declared_hash: str | None
    stage_c_pending: bool = True  # worth fetching ahead: a card not in the backlog is most likely skipped
    next_eligible_at: datetime | None = None  # backing off (throttled, refused by the settings) until then

    @property
    def known_hash(self) -> str | None:
        return self.content_hash or self.declared_hash


def _view(card: Card) -> _CardView:
    return _CardView(card.id, card.image_locator, card.content_hash, card.declared_content_hash,
                     bool(card.stage_c_pending), card.next_eligible_at)


def _iter_cards(engine: sa.Engine, card_ids: Sequence[int] | None, report: StageCReport, *,
                skip_leased: bool = False) -> Iterator[_CardView]:
    """The cards to process, in order. A card still backing off (throttled) is skipped here, unfetched
    and counted, so nothing fetches it (ahead or not) before its time; with ``skip_leased`` so is a
    card a live lease holds (a BULK pass beside streaming leaves a batch's cards to its run)."""

    def eligible(session: Session, views: list[_CardView]) -> Iterator[_CardView]:
        now = utcnow()
        leased = leased_elsewhere(session, [v.id for v in views], now=now) if skip_leased else set()
        for view in views:
            if view.id in leased:
                report.claimed_elsewhere += 1
                continue
            if view.next_eligible_at is not None and view.next_eligible_at > now:
                report.not_yet_eligible += 1
                if card_ids is not None:
                    report.deferred_card_ids.append(view.id)
                continue
            yield view

    if card_ids is not None:
        for start in range(0, len(card_ids), PAGE_SIZE):
            chunk = list(card_ids[start:start + PAGE_SIZE])
            with Session(engine) as session:
                found = cards_by_id(session, chunk)
                views = list(eligible(session, [_view(found[i]) for i in chunk if i in found]))
            yield from views
        return
    after = 0
    while True:
        with Session(engine) as session:
            page = [_view(c) for c in backlog_page(session, after, PAGE_SIZE)]
            views = list(eligible(session, page))
        if not page:
            return
        yield from views
        after = page[-1].id


def _evidence_row(session: Session, card_id: int, content_hash: str) -> ImageEvidence | None:
    return session.execute(
        sa.select(ImageEvidence).where(ImageEvidence.card_id == card_id, ImageEvidence.content_hash == content_hash)
    ).scalar_one_or_none()


def _settle_current(session: Session, view: _CardView, writer: str) -> None:
    """The present image already has current evidence: make sure the card says so, fetching nothing."""
    changed = view.content_hash != view.known_hash
    values: dict[str, object] = {"stage_c_pending": False, "content_hash": view.known_hash, **BACKOFF_CLEARED}
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
                retry_budget: int = DEFAULT_RETRY_BUDGET, fetch_ahead: int = FETCH_AHEAD,
                on_card: CardNote | None = None, skip_leased: bool = False, ocr_pass: str = "full",
                tail: TailHandOff | None = None) -> StageCReport:
    """Bring the evidence of ``card_ids`` (None: the whole Stage C backlog, by id) up to date.

    Ordinary per-card failures are counted and recorded, never raised. A 403 from an image host
    records a lockout outcome and stops at once; the report carries it and every card not
    reached is listed as deferred (for an explicit ``card_ids`` list; in BULK mode they simply
    stay in the backlog). ``should_stop`` is asked before every card; no card starts after it says
    stop. Up to ``fetch_ahead`` cards are fetched ahead in a thread while a card computes.
    ``on_card`` is told of each card that failed, was deferred or was left terminal. ``skip_leased``
    (BULK mode beside streaming) leaves alone every card a live lease holds. ``ocr_pass`` is how the
    text is read (``settings.ocr_pass``). ``tail``, asked before every card after ``should_stop``, may hand
    the cards after those taken to another batch (``dispatch/tail.py``): Stage C ends where they start,
    and never fetches one of them ahead.
    """
    if lexicon is None:
        lexicon = known_set_codes(engine)
    printed = printed_keys(engine)
    note = on_card or _ignore
    report = StageCReport()
    cards = FetchAhead(_iter_cards(engine, card_ids, report, skip_leased=skip_leased), fetcher, depth=fetch_ahead,
                       wanted=lambda view: view.stage_c_pending,
                       stop=None if tail is None else lambda view: tail.moved(view.id))
    stopped = False
    try:
        for view in cards:
            if limit is not None and report.attempted >= limit:
                break
            if should_stop is not None and should_stop():
                report.deferred_card_ids.append(view.id)
                stopped = report.stopped = True
                break
            if tail is not None and tail.gone(view.id, [taken.id for taken in cards.taken()]):
                break
            report.attempted += 1
            cards.start(None if limit is None else limit - report.attempted)
            try:
                _process_card(engine, view, report, writer=writer, run_id=run_id, fetcher=cards,  # type: ignore[arg-type]
                              lexicon=lexicon, printed=printed, retry_budget=retry_budget, note=note, ocr_pass=ocr_pass,
                              fingerprint=fetcher.settings_fingerprint)
            finally:
                if progress is not None:
                    progress(1)
            unused = cards.unused_lockout()
            if unused is not None and report.lockout is None:
                _lockout_met_ahead(engine, view, unused, report, run_id=run_id, note=note)
            if report.lockout is not None:
                break
    finally:
        met_ahead = cards.close()
    if met_ahead and report.lockout is None:
        _lockout_met_ahead(engine, *met_ahead[0], report, run_id=run_id, note=note)
    if (report.lockout is not None or stopped) and card_ids is not None:
        report.deferred_card_ids.extend(view.id for view in cards)
    return report


def _lockout_met_ahead(engine: sa.Engine, view: _CardView, exc: FetchLockout, report: StageCReport, *,
                       run_id: str | None, note: CardNote) -> None:
    """A 403 met by a fetch ahead that was never used (the card needed no fetch, or Stage C stopped
    before it): the host refused us all the same, so it is recorded and stops Stage C like any lockout."""
    with session_scope(engine) as session:
        record_fetch_outcome(session, "lockout", status_code=exc.status_code, host=exc.host, card_id=view.id,
                             run_id=run_id)
    report.lockout = LockoutInfo(exc.host, exc.status_code, view.id, view.locator, utcnow())
    log.warning("stage C stopped: %s (met fetching ahead)", exc)
    note(view.id, "lockout", f"HTTP {exc.status_code} from {exc.host} (fetching ahead): Stage C stops")


def _process_card(engine: sa.Engine, view: _CardView, report: StageCReport, *, writer: str, run_id: str | None,
                  fetcher: ImageFetcher, lexicon: frozenset[str], printed: PrintedKeys, retry_budget: int,
                  note: CardNote, fingerprint: str, ocr_pass: str = "full") -> None:
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
        note(view.id, "lockout", f"HTTP {exc.status_code} from {exc.host}: Stage C stops, a lockout trip opens")
        return

    if fetched.outcome == THROTTLED:
        _defer_throttled(engine, view, fetched, report, run_id=run_id)
        note(view.id, THROTTLED, f"HTTP {fetched.status_code} from {fetched.host}: deferred, stays in the backlog")
        return

    if fetched.outcome == CONFIG_REFUSED:
        _defer_config_refused(engine, view, fetched, report, fingerprint=fingerprint)
        note(view.id, CONFIG_REFUSED,
             f"{fetched.error_class}: not fetched, waits on configuration: fix {fetched.setting}")
        return

    if fetched.outcome in (FAILED, REJECTED):
        terminal = _persist_failed_fetch(engine, view, fetched, report, writer=writer, run_id=run_id,
                                         retry_budget=retry_budget, keys=keys)
        where = "terminal record written" if terminal else "stays in the backlog for another attempt"
        status = f" (HTTP {fetched.status_code})" if fetched.status_code else ""
        note(view.id, fetched.outcome, f"{fetched.error_class}{status}: {where}")
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
    result = compute_evidence(content_hash, fetched.data, latency_ms=fetched.latency_ms, keys=keys, lexicon=lexicon,
                              printed=printed, ocr_pass=ocr_pass)
    # The host delivered; bytes that do not decode are the upload's own problem, not a host failure.
    outcome = REJECTED if result.terminal else "ok"
    raised = _extractor_error_summary(result)
    with session_scope(engine) as session:
        record_fetch_outcome(session, outcome, status_code=fetched.status_code, host=fetched.host, card_id=view.id,
                             run_id=run_id, extractor_error=raised)
        persist_evidence(session, view.id, result, writer=writer, run_id=run_id, seen_hash=view.content_hash,
                         seen_locator=view.locator)
    report.completed += 1
    if raised is not None:
        report.extractor_errors += 1
        tracebacks = "\n".join(result.extractor_errors.values())
        note(view.id, EXTRACTOR_ERROR, f"{raised}; done without it (extractor-error recorded)\n{tracebacks}")
    if result.terminal:
        report.rejected += 1
        report.terminal += 1
        note(view.id, REJECTED, f"{result.error_class}: the image did not decode, terminal record written")


def _extractor_error_summary(result: ExtractionResult) -> str | None:
    """``"<keys>: <Class>: <message>"`` of the extractors that raised (the first one's error), or None."""
    if not result.extractor_errors:
        return None
    lines = [line for line in next(iter(result.extractor_errors.values())).strip().splitlines() if line.strip()]
    return f"{', '.join(result.extractor_errors)}: {lines[-1].strip() if lines else 'raised'}"[:300]


def _defer_throttled(engine: sa.Engine, view: _CardView, fetched: FetchResult, report: StageCReport, *,
                     run_id: str | None) -> None:
    """A 429/503: not a failure. The host is slowed for everyone by the shared pacer (the fetcher did
    that); the card stays in the backlog and waits a short while (or the host's longer Retry-After)
    before any batch takes it again."""
    answered = pacer.last_answered_at(engine, fetched.host) if fetched.host else None
    with session_scope(engine) as session:
        record_fetch_outcome(session, THROTTLED, status_code=fetched.status_code, host=fetched.host,
                             card_id=view.id, run_id=run_id)
        defer_card(session, view.id, seen_locator=view.locator, now=utcnow(), retry_after_s=fetched.retry_after_s,
                   host_answered_at=None if answered is None else datetime.fromtimestamp(answered, timezone.utc))
    report.throttled += 1
    report.deferred_card_ids.append(view.id)


def _defer_config_refused(engine: sa.Engine, view: _CardView, fetched: FetchResult, report: StageCReport, *,
                          fingerprint: str) -> None:
    """The settings forbid the locator: a configuration error, not a property of the card.

    Nothing is fetched, so no fetch outcome is recorded and no evidence written; the card leaves the
    backlog and waits on configuration until the settings change (``requeue_config_refused``).
    """
    with session_scope(engine) as session:
        wait_on_configuration(session, view.id, seen_locator=view.locator, fingerprint=fingerprint,
                              setting=fetched.setting or "")
    report.config_refused += 1
    report.deferred_card_ids.append(view.id)
    log.warning("card %s not fetched, refused by the settings: %s (fix %s). The card waits on configuration "
                "and is tried again once the settings change", view.id, fetched.detail or fetched.error_class,
                fetched.setting)


def _persist_failed_fetch(engine: sa.Engine, view: _CardView, fetched: FetchResult, report: StageCReport, *,
                          writer: str, run_id: str | None, retry_budget: int, keys: list[str] | None) -> bool:
    """Record the outcome; once it is permanent (or the retry budget is spent) persist a terminal
    record, and say so (True). A host failure (``failed``) counts in the fetch window and may be
    transient; a rejected upload is the card's own terminal outcome at once. A re-extraction (``keys`` = the stale ones)
    marks only those keys, keeping stored values."""
    assert fetched.error_class is not None
    if fetched.outcome == FAILED:
        report.fetch_failures += 1
    else:
        report.rejected += 1
    with session_scope(engine) as session:
        record_fetch_outcome(session, fetched.outcome, status_code=fetched.status_code, host=fetched.host,
                             card_id=view.id, run_id=run_id)
        if fetched.outcome == FAILED and fetched.transient and count_transient_failure(session, view.id) < retry_budget:
            return False  # stays in the backlog for a later attempt
        content_hash = view.known_hash or locator_key(view.locator)
        result: ExtractionResult = terminal_result(content_hash, fetched.error_class, latency_ms=fetched.latency_ms,
                                                   keys=keys)
        persist_evidence(session, view.id, result, writer=writer, run_id=run_id, seen_hash=view.content_hash,
                         seen_locator=view.locator)
    report.completed += 1
    report.terminal += 1
    return True
