"""One micro-batch through the stages, as the Dagster assets call it: guard, Stage C, Stage D, finish.

Each step is a plain function over the catalogue so it can be tested without Dagster; the
assets only read their context, call these, and turn the answers into ledger metadata.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..envelope.bars import Ceilings, EnvelopeSignals
from ..envelope.signals import current_rss_mb, failure_signals, peak_rss_mb
from ..envelope.trips import check_envelope, current_open_trip, open_trip
from ..settings import Settings
from .batches import dispatch_writer, get_batch, mark_succeeded, record_stage_c_end, still_held, take_batch
from .guard import FLAG_OFF, check_gate
from .tail import TailSplitter

if TYPE_CHECKING:  # the stages (OpenCV, ONNX Runtime, HTTP) load when a run first needs them, not at load
    from ..stage_c.fetch import ImageFetcher
    from ..stage_c.run import StageCReport
    from ..stage_d.run import StageDReport

# Why a run refused. ``gate``: streaming off or a trip open, the batch goes back to the backlog at no
# cost. ``taken``: another run holds the batch, or it has finished; the batch is left alone.
REFUSED_GATE = "gate"
REFUSED_TAKEN = "taken"

# Progress lines per stage and batch: a batch is sized to take about ``batch_target_s`` (60 s), so
# a line every quarter of it says every 15 s or so that the run is moving, whatever the batch size.
PROGRESS_LINES = 4

log = logging.getLogger(__name__)


class DispatchRefused(Exception):
    """The in-run guard said no: the run does no work."""

    def __init__(self, reason: str, trip_id: str | None, *, kind: str = REFUSED_GATE) -> None:
        super().__init__(reason)
        self.reason = reason
        self.trip_id = trip_id
        self.kind = kind


@dataclass(frozen=True)
class BatchInfo:
    batch_key: str
    card_ids: list[int]
    trigger_reason: str
    attempt: int


@dataclass
class BatchLog:
    """What a run says while it works, on the logger it is given (a Dagster run's ``context.log``):
    a progress line every ``every`` cards and one warning per card that did not simply complete."""

    logger: logging.Logger
    stage: str
    total: int
    done: int = 0
    noted: dict[str, int] = field(default_factory=dict)

    @property
    def every(self) -> int:
        return max(1, math.ceil(self.total / PROGRESS_LINES))

    def advance(self, cards: int) -> None:
        before, self.done = self.done, self.done + cards
        if self.done // self.every > before // self.every or self.done == self.total:
            outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.noted.items()))
            tail = f" ({outcomes})" if outcomes else ""
            self.logger.info(f"{self.stage}: {self.done} of {self.total} cards{tail}")

    def card(self, card_id: int, outcome: str, detail: str) -> None:
        self.noted[outcome] = self.noted.get(outcome, 0) + 1
        self.logger.warning(f"{self.stage}: card {card_id} {outcome}: {detail}")


@dataclass(frozen=True)
class StageCResult:
    """``batch`` is the batch as Stage C left it: without the cards it split off to batches of their
    own, whose runs account for them."""

    report: StageCReport
    lockout_trip_id: str | None
    batch: BatchInfo
    stopped_by_trip: str | None = None  # the trip (a lockout's or any other) that stopped Stage C early


def start_batch(engine: sa.Engine, settings: Settings, batch_key: str, *, run_id: str) -> BatchInfo:
    """The in-run guard, then take the batch (pending -> running, a compare-and-set) for this run.

    With streaming off nothing is opened or written. A refusal never touches the batch: the
    run-end handling puts a gate refusal's cards back, and a batch another run took is not ours.
    """
    if not settings.streaming_enabled:
        raise DispatchRefused(FLAG_OFF, None)
    now = utcnow()
    with session_scope(engine) as session:
        verdict = check_gate(session, settings, run_id=run_id, rss_mb=current_rss_mb())
        if verdict.allowed:
            lease = now + timedelta(seconds=settings.run_max_runtime_s + settings.claim_ttl_s)
            if take_batch(session, batch_key, run_id=run_id, now=now, lease_until=lease):
                batch = get_batch(session, batch_key)
                return BatchInfo(batch.batch_key, list(batch.card_ids), batch.trigger_reason, batch.attempt)
            batch = get_batch(session, batch_key)
            holder = f" by run {batch.run_id}" if batch.run_id else ""
            taken = DispatchRefused(
                f"batch {batch_key} is {batch.status}{holder}, not waiting", None, kind=REFUSED_TAKEN
            )
    # A trip the fresh sample opened is committed above; the refusal itself writes nothing.
    if verdict.allowed:
        raise taken
    raise DispatchRefused(verdict.reason, verdict.trip_id)


def lost_batch(engine: sa.Engine, batch_key: str, *, run_id: str) -> str | None:
    """Why the run must stop now, or ``None``: its batch is no longer its own (another evaluator failed or
    retried it, so a retry may be running its cards). Stamps the run's progress while it holds it."""
    with session_scope(engine) as session:
        if still_held(session, batch_key, run_id=run_id, now=utcnow()):
            return None
        batch = get_batch(session, batch_key)
        holder = f" by run {batch.run_id}" if batch.run_id and batch.run_id != run_id else ""
        return f"batch {batch_key} is {batch.status}{holder}, no longer held by run {run_id}"


def must_stop(engine: sa.Engine, batch_key: str, *, run_id: str) -> bool:
    """The per-card guard inside a run: an open trip, or a batch the run no longer holds, stops Stage C
    at the next card boundary. The open-trip check is global on purpose: any open trip halts all."""
    with session_scope(engine) as session:
        return current_open_trip(session) is not None or not still_held(
            session, batch_key, run_id=run_id, now=utcnow()
        )


def run_batch_stage_c(engine: sa.Engine, batch: BatchInfo, *, run_id: str, fetcher: ImageFetcher,
                      logger: logging.Logger | None = None, ocr_pass: str = "full",
                      split_for: tuple[Settings, str] | None = None,
                      ceilings: Ceilings | None = None) -> StageCResult:
    """Stage C over the batch. A lockout stops Stage C and opens a trip at once; the caller goes on to Stage D.

    Progress and every card that failed, was deferred or was left terminal go to ``logger``, as does the
    traceback of every extractor that raised. With ``ceilings``, a card read with an extractor error
    samples the failure bars at once, so a trip it crosses stops Stage C at the next card. With
    ``split_for`` (the settings and the dispatch pool), the batch hands its unstarted tail to a slot
    that would otherwise idle (``dispatch/tail.py``).
    """
    from ..stage_c.run import EXTRACTOR_ERROR, FETCH_AHEAD, run_stage_c

    said = BatchLog(logger or log, "stage C", len(batch.card_ids))

    def on_card(card_id: int, outcome: str, detail: str) -> None:
        said.card(card_id, outcome, detail)
        if outcome == EXTRACTOR_ERROR and ceilings is not None:
            with session_scope(engine) as session:
                if current_open_trip(session) is None:
                    trip = check_envelope(session, failure_signals(session, ceilings), ceilings, run_id=run_id)
                    if trip is not None:
                        said.logger.warning(f"stage C: {trip.bar} crossed ({trip.detail.get('cause')}): "
                                            f"opened trip {trip.trip_id}; Stage C stops at the next card")

    splitter = None
    if split_for is not None:
        settings, pool = split_for
        splitter = TailSplitter(engine, settings, batch_key=batch.batch_key, card_ids=batch.card_ids,
                                trigger_reason=batch.trigger_reason, run_id=run_id, pool=pool, ahead=FETCH_AHEAD)
    report = run_stage_c(
        engine,
        batch.card_ids,
        writer=dispatch_writer(run_id),
        run_id=run_id,
        fetcher=fetcher,
        should_stop=lambda: must_stop(engine, batch.batch_key, run_id=run_id),
        progress=said.advance,
        on_card=on_card,
        ocr_pass=ocr_pass,
        tail=splitter,
    )
    if splitter is not None and splitter.splits:
        for key, cards in splitter.splits:
            (logger or log).info(f"stage C: a slot was idle; the last {cards} cards not started went to batch {key}")
        batch = replace(batch, card_ids=[card_id for card_id in batch.card_ids if not splitter.moved(card_id)])
    trip_id = None
    if report.lockout is not None:
        with session_scope(engine) as session:
            trip = open_trip(
                session,
                "fetch_lockout",
                {"observed": 1, "ceiling": 0, "lockout": _lockout_detail(report), "batch_key": batch.batch_key},
                run_id=run_id,
            )
            trip_id = trip.trip_id
    with session_scope(engine) as session:
        stopped_by = trip_id or (_open_trip_id(session) if report.stopped else None)
        record_stage_c_end(session, batch.batch_key, run_id=run_id, cards_done=cards_done(report),
                           stopped_by_trip=stopped_by)
    return StageCResult(report=report, lockout_trip_id=trip_id, batch=batch, stopped_by_trip=stopped_by)


def cards_done(report: StageCReport) -> int:
    """Cards of the batch Stage C finished: evidence written (terminal records included) or already current."""
    return report.completed + report.skipped_current


def _open_trip_id(session: Session) -> str | None:
    trip = current_open_trip(session)
    return trip.trip_id if trip is not None else None


def _lockout_detail(report: StageCReport) -> dict[str, object]:
    lockout = report.lockout
    if lockout is None:
        return {}
    return {
        "host": lockout.host,
        "status_code": lockout.status_code,
        "card_id": lockout.card_id,
        "locator": lockout.locator,
    }


@dataclass(frozen=True)
class StageDResult:
    report: StageDReport
    lost: str | None = None  # why Stage D stopped between chunks: the batch was no longer this run's


def run_batch_stage_d(engine: sa.Engine, batch: BatchInfo, *, run_id: str,
                      logger: logging.Logger | None = None) -> StageDResult:
    """Stage D scoped to the batch: work already in hand drains even after a lockout, but a batch another
    evaluator took (failed and retried) stops it at the next chunk, so it never votes beside the retry.

    The batch goes in chunks of a quarter of it (each its own transaction) so ``logger`` hears of
    progress while it runs; the check between chunks also stamps the batch's progress (the run's sign
    of life while it holds it).
    """
    from ..stage_d.run import run_stage_d

    said = BatchLog(logger or log, "stage D", len(set(batch.card_ids)))
    lost: list[str] = []

    def batch_lost() -> bool:
        reason = lost_batch(engine, batch.batch_key, run_id=run_id)
        if reason is not None:
            lost.append(reason)
        return reason is not None

    report = run_stage_d(engine, batch.card_ids, run_id=run_id, chunk_size=said.every, progress=said.advance,
                         should_stop=batch_lost)
    return StageDResult(report, lost[0] if lost else None)


@dataclass(frozen=True)
class Finished:
    """How a run's batch ended: ``succeeded`` is False when the run no longer held it (``lost``)."""

    succeeded: bool
    peak_rss_mb: float | None
    envelope_trip_id: str | None


def finish_batch(engine: sa.Engine, settings: Settings, batch: BatchInfo, *, run_id: str) -> Finished:
    """Mark the batch done, release its claims, and check the run's true RSS peak against its bar.

    A run that can no longer mark its batch (another evaluator failed or retried it) reports it lost:
    its cards are the retry's, and its ledger row must not count them as done."""
    peak = peak_rss_mb()
    ceilings = Ceilings.from_settings(settings)
    with session_scope(engine) as session:
        succeeded = mark_succeeded(session, get_batch(session, batch.batch_key), now=utcnow(), peak_rss_mb=peak,
                                   run_id=run_id)
        trip = check_envelope(session, EnvelopeSignals(rss_mb=peak), ceilings, run_id=run_id)
        return Finished(succeeded, peak, trip.trip_id if trip else None)
