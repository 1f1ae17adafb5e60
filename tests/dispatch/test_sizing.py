"""Batch sizing by work: the measured seconds per card of recent batches, a trickle spread over the
free slots, the fixed size when set, and reads that stay bounded. On SQLite and PostgreSQL."""

from __future__ import annotations

import math
from datetime import timedelta
from itertools import count

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import MicroBatch
from stage_e_dagster.dispatch.batches import create_batches
from stage_e_dagster.dispatch.sizing import (
    BACKLOG,
    DEFAULT_SECONDS_PER_CARD,
    FIXED,
    HISTORY_BATCHES,
    MAX_BATCH_CARDS,
    RUN_START_S,
    TRICKLE,
    history_query,
    measured_seconds_per_card,
    plan_for_sweep,
    plan_for_tick,
    waiting_cards,
)
from stage_e_dagster.settings import Settings
from tests.factories import insert_cards

_keys = count()


def settings(**values: object) -> Settings:
    # A 60 s target: the figures below were worked out for it (the shipped default is test_settings' concern).
    return Settings(**{"max_concurrent_dispatches": 2, "batch_target_s": 60.0, **values})  # type: ignore[arg-type]


def add_history(engine: sa.Engine, *, seconds: float, cards: int, batches: int = 5, status: str = "succeeded",
                ago: timedelta = timedelta(0)) -> None:
    """Finished batches of ``cards`` cards that each took ``seconds`` from being taken to their end."""
    now = utcnow() - ago
    with session_scope(engine) as session:
        for i in range(batches):
            finished = now - timedelta(seconds=i)
            session.add(MicroBatch(
                batch_key=f"hist-{next(_keys)}", card_ids=list(range(1, cards + 1)), trigger_reason="card-created",
                status=status, started_at=finished - timedelta(seconds=seconds), finished_at=finished,
            ))


def tick(engine: sa.Engine, s: Settings, *, in_flight: int = 0, queue_ahead: bool = False):
    with session_scope(engine) as session:
        return plan_for_tick(s, in_flight_runs=in_flight, queue_ahead=queue_ahead, session=session,
                             predicate=STAGE_C_PENDING, now=utcnow())


def test_without_history_a_batch_holds_the_target_at_the_default_rate(engine: sa.Engine) -> None:
    insert_cards(engine, 50)
    plan = tick(engine, settings(batch_target_s=20 * DEFAULT_SECONDS_PER_CARD))  # 20 cards; 2 slots take 40
    assert (plan.basis, plan.batch_size, plan.max_batches) == (BACKLOG, 20, 2)
    assert plan.seconds_per_card == DEFAULT_SECONDS_PER_CARD and plan.waiting == 40


def test_fast_batches_make_bigger_batches_up_to_the_ceiling(engine: sa.Engine) -> None:
    insert_cards(engine, 1200)
    add_history(engine, seconds=1.0, cards=20)  # 0.05 s per card
    plan = tick(engine, settings(batch_target_s=20.0))
    assert (plan.basis, plan.batch_size) == (BACKLOG, 400)
    assert plan.seconds_per_card == pytest.approx(0.05)
    add_history(engine, seconds=0.1, cards=100)  # newer and far faster: the ceiling holds
    assert tick(engine, settings(batch_target_s=20.0)).batch_size == MAX_BATCH_CARDS


def test_slow_batches_make_smaller_batches(engine: sa.Engine) -> None:
    insert_cards(engine, 60)
    add_history(engine, seconds=40.0, cards=10)  # 4 s per card
    plan = tick(engine, settings())  # the default 60 s target
    assert (plan.basis, plan.batch_size) == (BACKLOG, 15)
    assert [len(cards) for cards in batch_cards(engine, plan)] == [15, 15]


def test_the_measure_is_weighted_by_cards_so_a_trickle_does_not_shrink_the_next_backlog(engine: sa.Engine) -> None:
    add_history(engine, seconds=13.5, cards=150, batches=2)  # 0.09 s per card in full batches
    add_history(engine, seconds=0.5, cards=1, batches=10)  # a trickle: each batch is mostly its fixed cost
    with session_scope(engine) as session:
        assert measured_seconds_per_card(session) == pytest.approx(0.09)  # by count the median would be 0.5
    add_history(engine, seconds=0.5, cards=1, batches=HISTORY_BATCHES, ago=timedelta(seconds=-60))
    with session_scope(engine) as session:  # only trickle batches left in the window: their rate is all there is
        assert measured_seconds_per_card(session) == pytest.approx(0.5)


def test_the_measure_is_a_median_of_recent_succeeded_batches(engine: sa.Engine) -> None:
    add_history(engine, seconds=2.0, cards=10, batches=3)  # 0.2 s per card
    add_history(engine, seconds=600.0, cards=10, batches=1)  # one stuck batch does not move the median
    add_history(engine, seconds=0.0, cards=10, batches=10, status="failed")  # failed ones do not count
    with session_scope(engine) as session:
        assert measured_seconds_per_card(session) == pytest.approx(0.2)
    # Only the newest HISTORY_BATCHES count: a new run of slow batches replaces old fast ones.
    add_history(engine, seconds=10.0, cards=10, batches=HISTORY_BATCHES, ago=timedelta(seconds=-60))
    with session_scope(engine) as session:
        assert measured_seconds_per_card(session) == pytest.approx(1.0)


def batch_cards(engine: sa.Engine, plan) -> list[list[int]]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as session:
        made = create_batches(session, STAGE_C_PENDING, plan, trigger_reason="card-created", now=utcnow(),
                              claim_ttl_s=600)
        return [list(b.card_ids) for b in made.batches]


def test_a_trickle_goes_out_at_once_spread_over_the_free_slots(engine: sa.Engine) -> None:
    worth_a_run = math.ceil(RUN_START_S / DEFAULT_SECONDS_PER_CARD)  # a run's start-up of work
    waiting = worth_a_run * 3 // 2  # less than 2 slots take; split in two, each would hold less than worth_a_run
    ids = insert_cards(engine, waiting)
    plan = tick(engine, settings(batch_target_s=200 * DEFAULT_SECONDS_PER_CARD))  # work size 200
    assert (plan.basis, plan.batch_size, plan.max_batches, plan.waiting) == (TRICKLE, worth_a_run, 2, waiting)
    assert batch_cards(engine, plan) == [ids[0::2], ids[1::2]]  # two batches, the cards dealt in turn
    more = insert_cards(engine, 1, prefix="late")
    plan = tick(engine, settings(batch_target_s=200 * DEFAULT_SECONDS_PER_CARD), in_flight=1)  # claimed cards are
    # not waiting; one slot left
    assert (plan.basis, plan.max_batches, plan.waiting) == (TRICKLE, 1, 1)
    assert batch_cards(engine, plan) == [more]


def test_with_the_pool_as_the_limit_each_slot_also_queues_one_batch(engine: sa.Engine) -> None:
    insert_cards(engine, 1000)
    plan = tick(engine, settings(batch_target_s=20 * DEFAULT_SECONDS_PER_CARD), queue_ahead=True)  # 20 cards a batch, 2 slots
    assert (plan.basis, plan.batch_size, plan.max_batches, plan.depth) == (BACKLOG, 20, 4, 4)
    plan = tick(engine, settings(batch_target_s=20 * DEFAULT_SECONDS_PER_CARD), in_flight=3, queue_ahead=True)
    assert plan.max_batches == 1
    plan = tick(engine, settings(batch_target_s=20 * DEFAULT_SECONDS_PER_CARD), in_flight=4, queue_ahead=True)
    assert plan.max_batches == 0
    # Without the pool as the limit (a governed limit below it), nothing waits beyond the slots.
    assert tick(engine, settings(batch_target_s=20 * DEFAULT_SECONDS_PER_CARD), in_flight=2).max_batches == 0


def test_less_than_a_full_queue_is_split_evenly_so_the_last_batches_end_together(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 600)
    plan = tick(engine, settings(batch_target_s=200 * DEFAULT_SECONDS_PER_CARD), queue_ahead=True)  # work size 200; 4 places take 800
    assert (plan.basis, plan.batch_size, plan.max_batches, plan.waiting) == (TRICKLE, 150, 4, 600)
    assert batch_cards(engine, plan) == [ids[i::4] for i in range(4)]  # 150 each, dealt in turn
    # The tail: one place free, 200 left, which one round of the two slots holds: half goes now.
    tail = insert_cards(engine, 200, prefix="tail")
    plan = tick(engine, settings(batch_target_s=200 * DEFAULT_SECONDS_PER_CARD), in_flight=3, queue_ahead=True)
    assert (plan.batch_size, plan.max_batches, plan.waiting) == (100, 1, 200)
    assert batch_cards(engine, plan) == [tail[:100]]


def test_a_backlog_one_round_of_slots_holds_goes_out_in_one_batch_per_slot(engine: sa.Engine) -> None:
    """Every run costs its start-up: 600 cards that two full batches hold are two runs, not four."""
    ids = insert_cards(engine, 600)
    add_history(engine, seconds=27.0, cards=300)  # 0.09 s per card: a full batch is the ceiling, 500 cards
    plan = tick(engine, settings(), queue_ahead=True)
    assert (plan.basis, plan.batch_size, plan.max_batches, plan.depth) == (TRICKLE, 300, 4, 4)
    assert batch_cards(engine, plan) == [ids[0::2], ids[1::2]]


def test_a_small_trickle_is_not_split_below_a_run_s_start_up_of_work(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 5)
    plan = tick(engine, settings())  # 5 cards at the default rate are less work than one run's start-up
    assert (plan.basis, plan.max_batches, plan.waiting) == (TRICKLE, 2, 5) and plan.batch_size >= 5
    assert batch_cards(engine, plan) == [ids]
    add_history(engine, seconds=40.0, cards=10)  # at 4 s per card each card is worth a run of its own
    more = insert_cards(engine, 3, prefix="slow")
    plan = tick(engine, settings(max_concurrent_dispatches=3))
    assert (plan.basis, plan.batch_size, plan.max_batches) == (TRICKLE, 1, 3)
    assert batch_cards(engine, plan) == [[i] for i in more]


def test_a_full_pool_reads_nothing(engine: sa.Engine) -> None:
    insert_cards(engine, 5)
    statements = _count_statements(engine)
    plan = tick(engine, settings(), in_flight=2)
    assert plan.max_batches == 0 and statements == []


def test_a_fixed_size_when_set_reads_nothing_and_ignores_history(engine: sa.Engine) -> None:
    insert_cards(engine, 5)
    add_history(engine, seconds=40.0, cards=10)
    statements = _count_statements(engine)
    plan = tick(engine, settings(micro_batch_size=3))
    assert (plan.basis, plan.batch_size, plan.max_batches) == (FIXED, 3, 2) and statements == []
    with session_scope(engine) as session:
        assert plan_for_sweep(settings(micro_batch_size=3), max_batches=4, session=session).batch_size == 3


def test_the_sweep_takes_work_sized_batches(engine: sa.Engine) -> None:
    add_history(engine, seconds=3.0, cards=10)  # 0.3 s per card
    with session_scope(engine) as session:
        plan = plan_for_sweep(settings(), max_batches=4, session=session)
    assert (plan.basis, plan.batch_size, plan.max_batches) == (BACKLOG, 200, 4)  # the default 60 s at 0.3 s per card


def test_a_tick_reads_two_bounded_statements(engine: sa.Engine) -> None:
    insert_cards(engine, 300)
    add_history(engine, seconds=1.5, cards=10, batches=HISTORY_BATCHES + 10)
    statements = _count_statements(engine)
    plan = tick(engine, settings(batch_target_s=3.0))  # 0.15 s per card: 20 per batch, 40 counted at most
    assert (plan.basis, plan.batch_size, plan.waiting) == (BACKLOG, 20, 40)
    assert len(statements) == 2 and all("LIMIT" in sql.upper() for sql in statements), statements
    with session_scope(engine) as session:
        assert waiting_cards(session, STAGE_C_PENDING, now=utcnow(), up_to=7) == 7


def test_the_history_read_uses_the_status_finished_index(engine: sa.Engine) -> None:
    add_history(engine, seconds=1.0, cards=10, batches=50)
    add_history(engine, seconds=1.0, cards=10, batches=50, status="failed")
    sql = str(history_query().compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE micro_batches")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
        else:
            plan = "\n".join(row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    assert "ix_micro_batches_status_finished" in plan, plan
    assert "SORT" not in plan.upper(), plan  # the index gives the order: no sort of all succeeded batches


def _count_statements(engine: sa.Engine) -> list[str]:
    """Statements run on ``engine`` from now until the test ends (SQLite's BEGIN aside)."""
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _seen(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if not statement.upper().startswith("BEGIN"):
            seen.append(statement)

    return seen
