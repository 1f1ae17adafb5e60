"""The one place micro-batches are sized.

A Dagster run costs seconds of start-up whatever it holds, so a batch should hold enough work to
be worth one: ``STAGE_E_BATCH_TARGET_S`` of it, at the seconds per card recent batches took. With
less waiting than the free dispatch slots could take at that size (a trickle), what waits goes out
at once instead of waiting for a full batch, spread over the free slots as long as each batch still
holds a run's start-up worth of work. ``STAGE_E_MICRO_BATCH_SIZE``, when set, replaces all of this
with a fixed count (at most that many cards per batch, one run per slot, as before).

While the pool itself caps how many dispatch runs go at once, each slot also holds one batch queued
behind its running one: when a run ends, Dagster's run queue starts the next within a second, not
after the next sensor tick. A backlog smaller than the queue holds at full size goes out in as few
batches as hold it (every run costs its start-up), in whole rounds of the slots and split evenly,
so the last batches end together rather than leaving a slot idle. Dealt batches still end apart
(a card's cost is known only once it ran), so a running batch with a slot idle beside it and nothing
waiting hands the last cards it has not started to a batch of their own (``tail_to_split``,
``dispatch/tail.py``).

The target is work, not cards (200 s by default), so a run's start-up stays about 2 % of its batch
however cheap a card gets, up to the 500-card ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import MicroBatch
from ..settings import Settings
from .claims import unclaimed_query

# A tick creates at most one batch per slot of the dispatch cap, and never fewer than this many may go:
# the sensor tick budget is 60 s and each batch is a committed row plus a partition, so the bound grows
# with the slots it has to fill, not with the backlog.
MIN_BATCHES_PER_TICK = 8
# Bounds of a work-sized batch. The ceiling keeps a batch's claims, card list and retry small even
# when cards turn out nearly free (Stage D only, or skipped as current).
MIN_BATCH_CARDS = 1
MAX_BATCH_CARDS = 500
# Seconds per card before any batch has succeeded: what a worker's Stage C spent per card of the seed
# corpus with the reader of issue 39 (0.42 s median, 0.44 s mean on 2026-12-06; the Tesseract reader's
# 0.1 s was the figure here until then). The low side on purpose: `stage-e bulk --workers 2` spent
# 0.72 s of CPU a card with Stage D and its processes, and a first batch too big only runs past the
# target once. Measured batches size the next ones; this only sizes a first backlog.
DEFAULT_SECONDS_PER_CARD = 0.4
# A dispatch run's start-up before its first line of user code: the queue launching it to the
# worker's RUN_START, a new process importing Dagster, OpenCV and the project (measured
# ~4 s on a quiet 2-core machine, 4.4-7 s under load by bench/scale.py). A trickle or a backlog's
# tail is split into one more batch only if each still holds this much work: a smaller split costs
# another run's start-up to save less time than that.
RUN_START_S = 4.0
# A batch split off a running one's tail is requested by the card_created_sensor tick watching the
# free slot within a quarter second (dispatch/arrivals.py), or by the next pass when no tick was
# watching (up to 1.5 s later); then its run starts up. Once the daemon passed every 5 s first: 6.5 s.
SPLIT_START_S = RUN_START_S + 0.5
# How many of the newest succeeded batches the measure looks at (read through (status, finished_at)).
HISTORY_BATCHES = 20
# Batches queued behind each running one while the pool caps the running ones (see the module's docstring).
QUEUED_AHEAD_PER_SLOT = 1
# A batch that took no measurable time must not make the next one unbounded (the ceiling holds anyway).
MIN_SECONDS_PER_CARD = 0.001

FIXED = "fixed"
BACKLOG = "backlog"
TRICKLE = "trickle"


@dataclass(frozen=True)
class BatchPlan:
    """How many cards per batch and how many batches. The rest says why, for logs and tests:
    ``basis`` is ``fixed`` (the setting), ``backlog`` (full work-sized batches) or ``trickle``
    (what waits, spread evenly over the queue); ``waiting`` is the unclaimed backlog counted, up to
    what the queue could take; ``depth`` is how many runs may be queued or going."""

    batch_size: int
    max_batches: int
    basis: str = FIXED
    seconds_per_card: float | None = None
    waiting: int | None = None
    depth: int | None = None


def max_batches_per_tick(settings: Settings) -> int:
    """Batches one tick may create: one per slot of ``STAGE_E_MAX_CONCURRENT_DISPATCHES`` (at least
    ``MIN_BATCHES_PER_TICK``), so every slot of a 16- or 64-core host can start from one tick."""
    return max(MIN_BATCHES_PER_TICK, settings.max_concurrent_dispatches)


def within_tick(plan: BatchPlan, settings: Settings, *, requested: int) -> BatchPlan:
    """``plan`` with no more new batches than the tick still has room for beside the ``requested`` batches
    it requests again: ``max_batches_per_tick`` in all."""
    return replace(plan, max_batches=min(plan.max_batches, max_batches_per_tick(settings) - requested))


def history_query() -> sa.Select[tuple[datetime | None, datetime | None, int]]:
    """The newest succeeded batches' start, end and card count: ``HISTORY_BATCHES`` rows read
    through the (status, finished_at) index, the card lists counted by the database."""
    return (
        sa.select(MicroBatch.started_at, MicroBatch.finished_at, sa.func.json_array_length(MicroBatch.card_ids))
        .where(MicroBatch.status == "succeeded", MicroBatch.finished_at.is_not(None))
        .order_by(MicroBatch.finished_at.desc())
        .limit(HISTORY_BATCHES)
    )


def measured_seconds_per_card(session: Session) -> float | None:
    """Seconds per card over the newest succeeded batches, the median weighted by cards; None without any.

    A batch's time runs from the moment its run took it to its end, Stage C and Stage D, so it leaves
    out the run's start-up. Weighting by cards lets big batches speak for the rate: a trickle's
    one-card batches are mostly each batch's fixed cost (about half a second here), and by count they
    would make the next backlog's batches a fifth of their size. The median still shrugs off a batch
    stopped early by a trip or stuck on a slow host, unless it holds half of the cards measured."""
    rows = session.execute(history_query()).all()
    rates = sorted(
        ((finished - started).total_seconds() / cards, cards)
        for started, finished, cards in rows
        if started is not None and cards
    )
    if not rates:
        return None
    half, seen = sum(cards for _, cards in rates) / 2, 0
    for rate, cards in rates:
        seen += cards
        if seen >= half:
            break
    return max(rate, MIN_SECONDS_PER_CARD)


def work_sized(settings: Settings, seconds_per_card: float) -> int:
    """Cards that take about ``STAGE_E_BATCH_TARGET_S`` at ``seconds_per_card``, within the bounds."""
    return max(MIN_BATCH_CARDS, min(MAX_BATCH_CARDS, round(settings.batch_target_s / seconds_per_card)))


def waiting_cards(session: Session, predicate: sa.ColumnElement[bool], *, now: datetime, up_to: int) -> int:
    """Unclaimed cards matching ``predicate``, counted up to ``up_to`` only (the backlog's partial index,
    ``LIMIT``ed): enough to tell a backlog from a trickle, never a count of the catalogue."""
    if up_to <= 0:
        return 0
    counted = unclaimed_query(predicate, now=now, limit=up_to).subquery()
    return int(session.execute(sa.select(sa.func.count()).select_from(counted)).scalar_one())


def plan_for_tick(
    settings: Settings,
    *,
    in_flight_runs: int,
    cap: int | None = None,
    queue_ahead: bool = False,
    session: Session,
    predicate: sa.ColumnElement[bool],
    now: datetime,
) -> BatchPlan:
    """Batches for one sensor tick: enough to fill the free dispatch slots, never more.

    ``cap`` is the dispatch concurrency as it stands (an operator's own pool limit, or the governed
    one); the setting when unknown. ``queue_ahead`` says the pool's limit is that cap, so runs queued
    beyond it wait for a slot: then each slot may also hold ``QUEUED_AHEAD_PER_SLOT`` batches.
    ``in_flight_runs`` counts queued and going runs alike. ``predicate`` is the backlog the tick
    selects from. Costs two bounded reads: the newest succeeded batches, and the backlog counted up
    to what the queue could take."""
    limit = settings.max_concurrent_dispatches if cap is None else cap
    if settings.micro_batch_size is not None:
        slots = min(max(0, limit - in_flight_runs), max_batches_per_tick(settings))
        return BatchPlan(batch_size=settings.micro_batch_size, max_batches=slots, depth=limit)
    depth = limit * (1 + QUEUED_AHEAD_PER_SLOT) if queue_ahead else limit
    slots = min(max(0, depth - in_flight_runs), max_batches_per_tick(settings))
    if slots == 0:
        return BatchPlan(batch_size=MIN_BATCH_CARDS, max_batches=0, basis=TRICKLE, depth=depth)
    rate = measured_seconds_per_card(session) or DEFAULT_SECONDS_PER_CARD
    full = work_sized(settings, rate)
    waiting = waiting_cards(session, predicate, now=now, up_to=depth * full)
    if waiting >= depth * full:
        return BatchPlan(batch_size=full, max_batches=slots, basis=BACKLOG, seconds_per_card=rate, waiting=waiting,
                         depth=depth)
    # Less than a full queue waits: as few rounds of the slots as hold it at full size or less, split
    # evenly so the batches end together, but never so small that a run's start-up costs
    # more than the work it holds.
    places = min(depth, max(1, math.ceil(waiting / (limit * full))) * limit)
    worth_a_run = min(full, math.ceil(RUN_START_S / rate))
    size = max(MIN_BATCH_CARDS, worth_a_run, math.ceil(waiting / places))
    return BatchPlan(batch_size=size, max_batches=slots, basis=TRICKLE, seconds_per_card=rate, waiting=waiting,
                     depth=depth)


def tail_to_split(left: int, seconds_per_card: float) -> int:
    """How many of the ``left`` cards a running batch has still to do (the current one included) to move
    from its end to a batch of their own for an idle slot: half of their work after the new run's
    start-up (``SPLIT_START_S``), so the two runs end together; 0 when that share is less work than a
    start-up, which the split would not win back."""
    share = math.floor((left * seconds_per_card - SPLIT_START_S) / (2 * seconds_per_card))
    return share if share >= MIN_BATCH_CARDS and share * seconds_per_card >= SPLIT_START_S else 0


def plan_for_sweep(settings: Settings, *, max_batches: int, session: Session) -> BatchPlan:
    """Batches for one backstop sweep: work-sized (or the fixed size); the pool, not the sweep, caps
    how many run at once. The walk ends a batch early at the end of the backlog, so a small backlog
    still goes out at once."""
    if settings.micro_batch_size is not None:
        return BatchPlan(batch_size=settings.micro_batch_size, max_batches=max_batches)
    rate = measured_seconds_per_card(session) or DEFAULT_SECONDS_PER_CARD
    return BatchPlan(
        batch_size=work_sized(settings, rate), max_batches=max_batches, basis=BACKLOG, seconds_per_card=rate
    )
