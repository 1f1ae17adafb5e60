"""Taking the next batch reads the backlog's partial index, not the catalogue (O(batch), any size)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.dispatch.claims import unclaimed_query
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
