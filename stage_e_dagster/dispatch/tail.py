"""A running batch hands the tail of its cards to a dispatch slot that would otherwise idle.

Batches are dealt before anyone knows what a card costs (Stage C with the PP-OCR reader takes from
0.2 s to several seconds a card), so the batches of one backlog end tens of seconds apart, and the
slot that finished first idles while the other runs on alone. The bulk tool's pool hands out one card
at a time and has no such tail. So a run looks, every ``CHECK_EVERY_S`` at a card boundary, for a
slot that is free with nothing waiting for it; then it moves the last cards it has not started to a
new pending batch (``batches.split_tail``), as many as make both runs end together
(``sizing.tail_to_split``). Only cards after every card Stage C has taken (the current one and those
its fetch-ahead took, whose fetches may have started) can move, and Stage C's fetch-ahead takes no
card that moved, so no card is fetched by both runs. The ``card_created_sensor`` tick watching the free slot requests that
batch (``dispatch.arrivals``), or else the next tick does.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from ..catalog.base import utcnow
from ..catalog.engine import read_scope, session_scope
from ..catalog.models import MicroBatch, PoolControl
from ..envelope.trips import current_open_trip
from ..settings import Settings
from .backlog_walk import SWEEP_TRIGGER
from .batches import IN_FLIGHT, split_tail
from .claims import unclaimed_query
from .sizing import tail_to_split
from .steering import standing_concurrency

# How often a run looks for an idle slot: one read without the write lock, against a card's 0.2-2 s.
# At 10 s a freed slot idled 5 s on average before a split noticed it.
CHECK_EVERY_S = 2.0
# Cards a run must have done before its own rate sizes a split.
MIN_CARDS_MEASURED = 5


def slot_free(session: Session, settings: Settings, *, pool: str) -> bool:
    """Whether a dispatch slot is free: fewer batches pending or running than the governed concurrency
    (the setting, before the governor's first decision), no hold and no open trip. A few rows read
    through their indexes: what a split re-reads under the write lock, since the cap rests on it."""
    control = session.get(PoolControl, pool)
    if control is not None and control.held_at is not None:
        return False
    cap = standing_concurrency(control, settings.max_concurrent_dispatches)
    in_flight = session.execute(
        sa.select(sa.func.count()).select_from(MicroBatch).where(MicroBatch.status.in_(IN_FLIGHT))
    ).scalar_one()
    return in_flight < cap and current_open_trip(session) is None


def card_waiting(session: Session) -> bool:
    """Whether an unclaimed card waits in either backlog. Each backlog is probed on its own partial
    index: asked as one OR of the two, both databases walk the cards table by its primary key."""
    now = utcnow()
    return any(session.execute(unclaimed_query(backlog, now=now, limit=1)).first() is not None
               for backlog in (STAGE_C_PENDING, STAGE_D_PENDING))


def slot_idle(session: Session, settings: Settings, *, pool: str) -> bool:
    """Whether a dispatch slot is free (:func:`slot_free`) with nothing waiting for it: no unclaimed
    card in either backlog, which a sensor would batch for that slot anyway."""
    return slot_free(session, settings, pool=pool) and not card_waiting(session)


class TailSplitter:
    """Asked before each card of a batch's Stage C whether the card went to another batch.

    ``card_ids`` is the batch in the order Stage C takes it. Stage C says, with each card, which cards
    it has taken (the current one and those its fetch-ahead took: they stay, whatever their place, since
    a card skipped while backing off is not taken and the fetch-ahead reaches past it), and ``ahead``
    more places after the current card, the fetch-ahead's depth, so the run keeps the cards it is about
    to take as well. A split moves
    cards from the end, so once one card has gone, every card after it has too: Stage C stops there,
    and its fetch-ahead takes none of them (``moved``)."""

    def __init__(self, engine: sa.Engine, settings: Settings, *, batch_key: str, card_ids: Sequence[int],
                 trigger_reason: str, run_id: str, pool: str, ahead: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._engine, self._settings, self._pool = engine, settings, pool
        self._batch_key, self._run_id, self._ahead = batch_key, run_id, ahead
        self._card_ids = list(card_ids)
        self._position = {card_id: i for i, card_id in enumerate(self._card_ids)}
        self._gone: set[int] = set()
        # A sweep's batches belong to its backfill; a fixed batch size (STAGE_E_MICRO_BATCH_SIZE) is all it asks.
        self._enabled = trigger_reason != SWEEP_TRIGGER and settings.micro_batch_size is None
        self._clock = clock
        self._started: float | None = None
        self._next_check = 0.0
        self.splits: list[tuple[str, int]] = []  # (new batch key, cards) in order

    def moved(self, card_id: int) -> bool:
        """Whether a split moved this card to another batch."""
        return card_id in self._gone

    def gone(self, card_id: int, taken: Sequence[int] = ()) -> bool:
        """Whether the card went to another batch; first splits the tail off if a slot idles (see the class).
        ``taken``: the cards Stage C has taken so far and not finished (this one and those fetching ahead)."""
        if card_id in self._gone:
            return True
        now = self._clock()
        if self._started is None:
            self._started, self._next_check = now, now + CHECK_EVERY_S
            return False
        if not self._enabled or now < self._next_check or card_id not in self._position:
            return False
        self._next_check = now + CHECK_EVERY_S
        done = self._position[card_id]
        if done < MIN_CARDS_MEASURED:
            return False
        first_movable = max([done + self._ahead, *(self._position[c] for c in taken if c in self._position)]) + 1
        unstarted = [c for c in self._card_ids[first_movable:] if c not in self._gone]
        # The cards that stay (this one and those fetching ahead) count in what the two runs share.
        staying = len([c for c in self._card_ids[done:first_movable] if c not in self._gone])
        share = min(len(unstarted), tail_to_split(staying + len(unstarted), (now - self._started) / done))
        if not share:
            return False
        with read_scope(self._engine) as session:  # the common answer, no: no write lock taken for it
            if not slot_idle(session, self._settings, pool=self._pool):
                return False
        # The write lock only to split: the slot is asked again under it (the cap rests on that answer),
        # the backlogs are not. A card landing meanwhile is batched by the sensors if a slot is left, and
        # waits for the next one if not, as it would have beside a split made a moment earlier.
        with session_scope(self._engine) as session:
            if not slot_free(session, self._settings, pool=self._pool):
                return False
            new = split_tail(session, self._batch_key, run_id=self._run_id, tail=unstarted[-share:], now=utcnow(),
                             claim_ttl_s=self._settings.claim_ttl_s)
            if new is None:
                return False
            moved = list(new.card_ids)
        self._gone.update(moved)
        self.splits.append((new.batch_key, len(moved)))
        return False  # the current card is never in the tail: it is before the cards fetching ahead
