"""Concurrent Stage D runs over overlapping cards on PostgreSQL: no integrity error, no duplicate."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.models import PrintingVote, ScanLog, StageDPass
from stage_e_dagster.stage_d.run import StageDReport, run_stage_d

from .builders import CatalogueBuilder

pytestmark = [pytest.mark.postgres]


def test_overlapping_concurrent_runs_write_each_vote_once(pg_url_fresh: str) -> None:
    setup = make_engine(pg_url_fresh)
    b = CatalogueBuilder(setup)
    for i in range(1, 41):
        b.printing(f"Card {i}", "dmu", str(i))
    b.expansion("m10")
    cards = []
    for i in range(1, 121):
        n = (i % 40) + 1
        if i % 3 == 0:   # no printing of this name in m10: a no-match vote
            ev = dict(collector_set_code="m10", collector_number=str(n))
        elif i % 7 == 0:  # unknown set code: abstain, fallback abstains, routed to review
            ev = dict(collector_set_code="qqq", collector_number=str(n))
        else:
            ev = dict(collector_set_code="dmu", collector_number=str(n))
        cards.append(b.card(f"Card {n}", evidence=ev))
    setup.dispose()

    scopes = [cards[0:80], cards[40:120], cards[20:100], cards[::2]]
    barrier = threading.Barrier(len(scopes))
    reports: list[StageDReport] = []
    errors: list[BaseException] = []

    def worker(scope: list[int], n: int) -> None:
        engine = make_engine(pg_url_fresh)
        try:
            barrier.wait()
            reports.append(run_stage_d(engine, scope, run_id=f"run-{n}", chunk_size=25))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=worker, args=(s, n)) for n, s in enumerate(scopes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(reports) == len(scopes)

    check = make_engine(pg_url_fresh)
    with check.connect() as conn:
        vote_keys = conn.execute(sa.select(PrintingVote.card_id, PrintingVote.agent_id)).all()
        log_keys = conn.execute(sa.select(ScanLog.card_id, ScanLog.agent_id)).all()
        pass_count = conn.execute(sa.select(sa.func.count()).select_from(StageDPass)).scalar_one()
    check.dispose()
    assert max(Counter(vote_keys).values()) == 1
    assert max(Counter(log_keys).values()) == 1
    # Each card was written exactly once, whichever run won it.
    assert sum(r.join_key_votes for r in reports) == sum(1 for _, agent in vote_keys if agent.endswith("join-key-v1"))
    assert sum(r.abstentions for r in reports) == len(log_keys)
    assert len({cid for cid, _ in vote_keys} | {cid for cid, _ in log_keys}) == len(cards)
    assert pass_count >= len(cards)
