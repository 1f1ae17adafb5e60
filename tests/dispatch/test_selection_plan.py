"""Taking the next batch reads the backlog's partial index, not the catalogue (O(batch), any size)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import read_scope, session_scope
from stage_e_dagster.catalog.models import Card
from stage_e_dagster.dispatch.batches import record_batch, take_batch
from stage_e_dagster.dispatch.claims import unclaimed_query
from stage_e_dagster.dispatch.tail import slot_idle
from stage_e_dagster.settings import Settings
from tests.factories import insert_cards

CASES = [
    (STAGE_C_PENDING, "ix_cards_stage_c_backlog"),
    (STAGE_D_PENDING, "ix_cards_stage_d_backlog"),
]


def _plan(engine: sa.Engine, predicate: sa.ColumnElement[bool]) -> str:
    query = unclaimed_query(predicate, now=utcnow(), limit=25, after_id=10)
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE cards")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            return "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
        return "\n".join(row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))


@pytest.mark.parametrize(("predicate", "index"), CASES)
def test_backlog_selection_uses_its_partial_index(engine: sa.Engine, predicate, index: str) -> None:
    insert_cards(engine, 300)
    with engine.begin() as conn:  # most cards done, a few waiting for each stage
        conn.execute(sa.text("UPDATE cards SET stage_c_pending = (id % 50 = 0), stage_d_pending = (id % 70 = 0)"))
    plan = _plan(engine, predicate)
    assert index in plan, plan


BACKLOG_INDEXES = tuple(index for _, index in CASES)


class Statements:
    """Every statement the engine sends, and whether SQLite's write lock was held for it (a
    ``BEGIN IMMEDIATE`` transaction not yet committed or rolled back)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.sent: list[tuple[str, object, bool]] = []
        self._locked = False
        sa.event.listen(engine, "before_cursor_execute", self._before)
        sa.event.listen(engine, "commit", self._ended)
        sa.event.listen(engine, "rollback", self._ended)

    def _before(self, conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.strip().upper().startswith("BEGIN"):
            self._locked = statement.strip().upper() == "BEGIN IMMEDIATE"
            return
        self.sent.append((statement, parameters, self._locked))

    def _ended(self, conn) -> None:  # type: ignore[no-untyped-def]
        self._locked = False

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._before)
        sa.event.remove(self.engine, "commit", self._ended)
        sa.event.remove(self.engine, "rollback", self._ended)

    def reading_cards(self, *, locked: bool | None = None) -> list[tuple[str, object]]:
        return [(s, p) for s, p, held in self.sent
                if s.lstrip().upper().startswith("SELECT") and " cards" in s and (locked is None or held == locked)]


def _plan_of(engine: sa.Engine, statement: str, parameters: object) -> str:
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE cards")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            return "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters))
        return "\n".join(row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))


def _finished_catalogue_with_a_running_batch(engine: sa.Engine) -> None:
    """Most cards done, none waiting, one batch running beside a free slot: the probe's usual answer."""
    ids = insert_cards(engine, 300)
    running = ids[-10:]
    with engine.begin() as conn:
        conn.execute(sa.update(Card).values(stage_c_pending=Card.id.in_(running), stage_d_pending=False))
    now = utcnow()
    with session_scope(engine) as session:
        batch = record_batch(session, running, trigger_reason="card-created", now=now, claim_ttl_s=600, attempt=1)
        assert batch is not None
        assert take_batch(session, batch.batch_key, run_id="run-1", now=now, lease_until=now + timedelta(hours=1))


def test_the_tail_splits_idle_slot_probe_reads_each_backlog_on_its_partial_index(engine: sa.Engine) -> None:
    """Issue 40 item 4: the probe a running batch makes every CHECK_EVERY_S asked for an unclaimed card
    in either backlog with one OR, which SQLite answers by walking the cards table by primary key."""
    _finished_catalogue_with_a_running_batch(engine)
    sent = Statements(engine)
    try:
        with read_scope(engine) as session:
            assert slot_idle(session, Settings(max_concurrent_dispatches=2), pool="stage_e_dispatch")
    finally:
        sent.close()
    reads = sent.reading_cards()
    assert reads, "the probe read no card"
    used = set()
    for statement, parameters in reads:
        plan = _plan_of(engine, statement, parameters)
        on_cards = [line for line in plan.splitlines() if "cards " in line.replace(" on cards", " cards ")
                    and "card_claims" not in line]
        assert on_cards and all(any(index in line for index in BACKLOG_INDEXES) for line in on_cards), (
            f"the probe reads cards past its backlog indexes:\n{statement}\n{plan}")
        used.update(index for index in BACKLOG_INDEXES if index in plan)
    assert used == set(BACKLOG_INDEXES)


def test_a_tail_split_takes_sqlites_write_lock_only_to_split(sqlite_engine: sa.Engine) -> None:
    """Issue 40 item 4: asked again under ``BEGIN IMMEDIATE`` before splitting, the backlog probe held
    every other writer of the catalogue (the sensors, the other run) off for its whole walk. Under the
    lock the split re-reads only the slot (hold, in-flight batches, trips), then moves the tail."""
    from stage_e_dagster.dispatch.tail import TailSplitter

    engine = sqlite_engine
    ids = insert_cards(engine, 100)
    now = utcnow()
    with session_scope(engine) as session:
        batch = record_batch(session, ids, trigger_reason="card-created", now=now, claim_ttl_s=600, attempt=1)
        assert batch is not None
        key = batch.batch_key
        assert take_batch(session, key, run_id="run-1", now=now, lease_until=now + timedelta(hours=1))
    ticks = iter(range(10**6))
    splitter = TailSplitter(engine, Settings(max_concurrent_dispatches=2), batch_key=key, card_ids=ids,
                            trigger_reason="card-created", run_id="run-1", pool="stage_e_dispatch", ahead=2,
                            clock=lambda: float(next(ticks)))
    sent = Statements(engine)
    try:
        for card_id in ids:
            if splitter.gone(card_id):
                break
    finally:
        sent.close()
    assert splitter.splits, "no split: the test needs one to see what runs under the lock"
    assert sent.reading_cards(locked=False), "the idle-slot probe did not read the backlogs"
    under_lock = sent.reading_cards(locked=True)
    assert under_lock == [], "read under the write lock:\n" + "\n".join(s for s, _ in under_lock)
