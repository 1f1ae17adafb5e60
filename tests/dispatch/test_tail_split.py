"""A running batch hands its unstarted tail to an idle slot (``dispatch/tail.py``): how much, when
never, and that every card stays in exactly one batch with its claim."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import CardClaim, MicroBatch, PoolControl
from stage_e_dagster.dispatch.backlog_walk import SWEEP_TRIGGER
from stage_e_dagster.dispatch.batches import record_batch, request_again, split_tail, take_batch
from stage_e_dagster.dispatch.sizing import SPLIT_START_S, tail_to_split
from stage_e_dagster.dispatch.tail import CHECK_EVERY_S, MIN_CARDS_MEASURED, TailSplitter
from stage_e_dagster.envelope.trips import open_trip
from stage_e_dagster.settings import Settings
from tests.factories import insert_cards

TTL = 600
POOL = "stage_e_dispatch"
AHEAD = 2


@pytest.mark.parametrize(
    ("left", "seconds_per_card", "share"),
    [
        (50, 0.8, 22),  # 40 s left: 22 cards (17.6 s) go, after the new run's 4.5 s start; 28 stay (22.4 s)
        (500, 0.8, 247),
        (17, 0.8, 0),  # 13.6 s left: a 5-card share (4 s) would not win back a run's start-up
        (100, 0.1, 0),  # 10 s left at 0.1 s a card: the 27 cards a split moves are 2.7 s of work
        (200, 0.1, 77),
        (0, 0.8, 0),
        (3, 30.0, 1),  # slow cards: one card is worth a run of its own
    ],
)
def test_a_split_takes_half_the_tail_s_work_after_a_run_s_start_up(left: int, seconds_per_card: float,
                                                                   share: int) -> None:
    assert tail_to_split(left, seconds_per_card) == share
    if share:
        stays, goes = (left - share) * seconds_per_card, SPLIT_START_S + share * seconds_per_card
        assert abs(stays - goes) <= 2 * seconds_per_card  # the two runs end within a card or two of each other


def running_batch(engine: sa.Engine, cards: int, *, run_id: str = "run-1", trigger: str = "card-created",
                  attempt: int = 1) -> tuple[str, list[int]]:
    ids = insert_cards(engine, cards, prefix=f"{run_id}-{trigger}")
    now = utcnow()
    with session_scope(engine) as session:
        batch = record_batch(session, ids, trigger_reason=trigger, now=now, claim_ttl_s=TTL, attempt=attempt)
        assert batch is not None
        key = batch.batch_key
        assert take_batch(session, key, run_id=run_id, now=now, lease_until=now + timedelta(hours=1))
    return key, ids


def claims_by_batch(engine: sa.Engine) -> dict[str, list[int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(CardClaim.batch_key, CardClaim.card_id).order_by(CardClaim.card_id)).all()
    found: dict[str, list[int]] = {}
    for key, card_id in rows:
        found.setdefault(key, []).append(card_id)
    return found


def test_a_split_moves_the_tail_and_its_claims_to_a_new_batch_for_the_next_tick_to_request(
    engine: sa.Engine,
) -> None:
    key, ids = running_batch(engine, 10, attempt=2)
    with session_scope(engine) as session:
        new = split_tail(session, key, run_id="run-1", tail=ids[6:], now=utcnow(), claim_ttl_s=TTL)
        assert new is not None
        new_key = new.batch_key
    with session_scope(engine) as session:
        old, split = session.get(MicroBatch, key), session.get(MicroBatch, new_key)
        assert (old.status, old.run_id, old.card_ids) == ("running", "run-1", ids[:6])
        assert (split.status, split.card_ids, split.trigger_reason, split.attempt) == ("pending", ids[6:],
                                                                                        "card-created", 2)
        assert (split.requested_at, split.request_count, split.run_id) == (None, 0, None)
    assert claims_by_batch(engine) == {key: ids[:6], new_key: ids[6:]}
    with session_scope(engine) as session:  # what the next tick's reconcile does with it
        requested = request_again(session, session.get(MicroBatch, new_key), now=utcnow(), claim_ttl_s=TTL)
        assert requested is not None and requested.card_ids == ids[6:]


def test_only_the_holding_run_splits_and_never_its_whole_batch(engine: sa.Engine) -> None:
    key, ids = running_batch(engine, 4)
    with session_scope(engine) as session:
        assert split_tail(session, key, run_id="run-2", tail=ids[2:], now=utcnow(), claim_ttl_s=TTL) is None
        assert split_tail(session, key, run_id="run-1", tail=ids, now=utcnow(), claim_ttl_s=TTL) is None
        assert split_tail(session, key, run_id="run-1", tail=[10**9], now=utcnow(), claim_ttl_s=TTL) is None
    with session_scope(engine) as session:
        assert session.get(MicroBatch, key).card_ids == ids
        assert session.execute(sa.select(sa.func.count()).select_from(MicroBatch)).scalar_one() == 1
    assert claims_by_batch(engine) == {key: ids}


class Clock:
    """A card a second."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self._ticks))


def walk(engine: sa.Engine, key: str, ids: list[int], *, trigger: str = "card-created",
         settings: Settings | None = None) -> tuple[list[int], TailSplitter]:
    """Stage C's loop as ``run_stage_c`` asks: the cards it would take before one has gone."""
    splitter = TailSplitter(engine, settings or Settings(max_concurrent_dispatches=2), batch_key=key, card_ids=ids,
                            trigger_reason=trigger, run_id="run-1", pool=POOL, ahead=AHEAD, clock=Clock())
    taken = []
    for i, card_id in enumerate(ids):
        if splitter.gone(card_id, ids[i:i + AHEAD + 1]):  # this card and those fetching ahead
            break
        taken.append(card_id)
    return taken, splitter


def test_a_run_beside_an_idle_slot_splits_its_tail_and_stops_before_it(engine: sa.Engine) -> None:
    key, ids = running_batch(engine, 100)
    taken, splitter = walk(engine, key, ids)
    assert len(splitter.splits) >= 1
    new_key, cards = splitter.splits[0]
    # A check comes every CHECK_EVERY_S cards, at a second a card; the first that splits is the first
    # after MIN_CARDS_MEASURED cards are done. The cards fetching ahead stay.
    at = next(k for k in itertools.count(int(CHECK_EVERY_S), int(CHECK_EVERY_S)) if k >= MIN_CARDS_MEASURED)
    left = len(ids) - at  # this card, those fetching ahead and the ones kept beside them stay
    assert cards == tail_to_split(left, 1.0) and cards <= left - (AHEAD + 1)
    with session_scope(engine) as session:
        split = session.get(MicroBatch, new_key)
        assert split.card_ids == ids[len(ids) - cards:]
        kept = session.get(MicroBatch, key).card_ids
    assert taken == kept  # Stage C takes every card that stayed and none that left
    assert sorted(kept + [c for k, _ in splitter.splits for c in claims_by_batch(engine)[k]]) == ids


def _another_batch_fills_the_cap(engine: sa.Engine) -> Settings:
    running_batch(engine, 3, run_id="run-9")
    return Settings(max_concurrent_dispatches=2)


def _a_card_waits(engine: sa.Engine) -> Settings:
    insert_cards(engine, 1, prefix="waiting")
    return Settings(max_concurrent_dispatches=2)


def _a_trip_is_open(engine: sa.Engine) -> Settings:
    with session_scope(engine) as session:
        open_trip(session, "rss", {"observed": 900, "ceiling": 768})
    return Settings(max_concurrent_dispatches=2)


def _the_pool_is_held(engine: sa.Engine) -> Settings:
    with session_scope(engine) as session:
        session.add(PoolControl(pool=POOL, held_at=utcnow(), held_from=2))
    return Settings(max_concurrent_dispatches=2)


def _the_governor_allows_one(engine: sa.Engine) -> Settings:
    with session_scope(engine) as session:
        session.add(PoolControl(pool=POOL, governed_limit=1))
    return Settings(max_concurrent_dispatches=2)


def _a_fixed_batch_size(engine: sa.Engine) -> Settings:
    return Settings(max_concurrent_dispatches=2, micro_batch_size=100)


@pytest.mark.parametrize("blocker", [_another_batch_fills_the_cap, _a_card_waits, _a_trip_is_open,
                                     _the_pool_is_held, _the_governor_allows_one, _a_fixed_batch_size])
def test_no_split_without_an_idle_slot_that_nothing_else_would_fill(engine: sa.Engine, blocker) -> None:
    key, ids = running_batch(engine, 100)
    settings = blocker(engine)
    taken, splitter = walk(engine, key, ids, settings=settings)
    assert (taken, splitter.splits) == (ids, [])
    with session_scope(engine) as session:
        assert session.get(MicroBatch, key).card_ids == ids


def test_a_sweep_s_batch_is_never_split(engine: sa.Engine) -> None:
    """A sweep's partitions belong to its backfill: a split-off batch would be a run outside it."""
    key, ids = running_batch(engine, 100, trigger=SWEEP_TRIGGER)
    taken, splitter = walk(engine, key, ids, trigger=SWEEP_TRIGGER)
    assert (taken, splitter.splits) == (ids, [])


class RecordingFetcher:
    """Answers every fetch 429 at once (the card is deferred, nothing decoded) and records what it fetched."""

    settings_fingerprint = "test"

    def __init__(self) -> None:
        self.fetched: list[str] = []

    def fetch(self, locator: str):  # type: ignore[no-untyped-def]
        from stage_e_dagster.stage_c.fetch import FetchResult

        self.fetched.append(locator)
        return FetchResult(outcome="throttled", locator=locator, status_code=429, host="images.example.org")


def test_a_split_never_takes_a_card_the_run_is_already_fetching_ahead(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cards backing off are skipped unfetched, so the fetch-ahead reaches far past the current card's
    position in the batch: a split sized by positions took cards this run was already fetching, and
    the run that took them fetched them again."""
    from stage_e_dagster.catalog.models import Card
    from stage_e_dagster.dispatch import sizing, tail
    from stage_e_dagster.dispatch.conveyor import BatchInfo, run_batch_stage_c

    monkeypatch.setattr(tail, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(tail, "MIN_CARDS_MEASURED", 1)
    monkeypatch.setattr(sizing, "SPLIT_START_S", 0.0)
    key, ids = running_batch(engine, 34)
    backing_off = ids[6:30]  # skipped unfetched: the fetch-ahead goes from ids[5] straight to ids[30]
    with engine.begin() as conn:
        conn.execute(sa.update(Card).where(Card.id.in_(backing_off)).values(next_eligible_at=utcnow() + timedelta(hours=1)))
        locators = dict(conn.execute(sa.select(Card.id, Card.image_locator).where(Card.id.in_(ids))).all())
    fetcher = RecordingFetcher()
    run_batch_stage_c(engine, BatchInfo(key, ids, "card-created", 1), run_id="run-1", fetcher=fetcher,  # type: ignore[arg-type]
                      ocr_pass="cheap", split_for=(Settings(max_concurrent_dispatches=2), POOL))
    moved = [card_id for batch_key, cards in claims_by_batch(engine).items() if batch_key != key for card_id in cards]
    assert moved, "no split: the test no longer exercises a split"
    fetched_and_moved = sorted(card_id for card_id in moved if locators[card_id] in fetcher.fetched)
    assert fetched_and_moved == [], f"moved to another batch after this run fetched them: {fetched_and_moved}"
    # every card that stayed and was not backing off was fetched, once
    stayed = [card_id for card_id in ids if card_id not in moved and card_id not in backing_off]
    assert sorted(fetcher.fetched) == sorted(locators[card_id] for card_id in stayed)
