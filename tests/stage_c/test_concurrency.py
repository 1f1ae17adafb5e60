"""Cross-process safety: the evidence upsert under concurrent writers, and the shared fetch pacer."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.models import Card, ImageEvidence
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.stage_c.compute import ExtractionResult
from stage_e_dagster.stage_c.pacer import reserve_slot
from stage_e_dagster.stage_c.persist import persist_evidence

from .conftest import make_fetcher


def _result(key: str, field: str, value: object) -> ExtractionResult:
    result = ExtractionResult(content_hash="abc")
    result.fields[field] = value
    result.extractor_versions[key] = "v-test"
    result.skip_reasons[key] = None
    return result


@pytest.mark.postgres
def test_concurrent_persists_of_one_card_leave_one_merged_row(pg_engine: sa.Engine) -> None:
    with pg_engine.begin() as conn:
        cid = conn.execute(sa.insert(Card).values(identifier="x", name="X", image_locator="file:///x.jpg")
                           .returning(Card.id)).scalar_one()
    results = [_result(f"key{i}", "width", 100 + i) for i in range(8)]
    barrier = threading.Barrier(len(results))
    errors: list[BaseException] = []

    def write(result: ExtractionResult) -> None:
        try:
            barrier.wait()
            with Session(pg_engine) as s, s.begin():
                persist_evidence(s, cid, result, writer="w", run_id=None, seen_hash=None, seen_locator="file:///x.jpg")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Session(pg_engine) as s:
        [row] = s.execute(sa.select(ImageEvidence).where(ImageEvidence.card_id == cid)).scalars().all()
    assert row.extractor_versions == {f"key{i}": "v-test" for i in range(8)}


def test_pacer_spaces_slots_across_threads(engine: sa.Engine) -> None:
    slots: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(10):
            slot = reserve_slot(engine, "images.example.org", 50.0, now=1000.0)
            with lock:
                slots.append(slot)

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ordered = sorted(slots)
    assert len(set(ordered)) == 30
    assert all(b - a >= 0.02 - 1e-9 for a, b in zip(ordered, ordered[1:]))
    assert ordered[-1] - ordered[0] == pytest.approx(29 * 0.02)


def _worker(url: str, root: str, ids: list[int], writer: str) -> None:
    from stage_e_dagster.stage_c.run import run_stage_c

    engine = make_engine(url)
    with make_fetcher(engine, [Path(root)], max_bytes=25_000_000) as fetcher:
        run_stage_c(engine, ids, writer=writer, run_id=writer, fetcher=fetcher)
    engine.dispose()


@pytest.mark.slow
@pytest.mark.postgres
def test_two_processes_on_the_same_cards_write_one_row_each(pg_url_fresh: str, tmp_path: Path) -> None:
    engine = make_engine(pg_url_fresh)
    seed_corpus(engine, tmp_path, cards=6, seed=3, broken_share=0.0)
    with engine.connect() as conn:
        ids = list(conn.execute(sa.select(Card.id).order_by(Card.id)).scalars())
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(pg_url_fresh, str(tmp_path), ids, f"dispatch:p{i}")) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    with engine.connect() as conn:
        per_card = dict(conn.execute(
            sa.select(ImageEvidence.card_id, sa.func.count()).group_by(ImageEvidence.card_id)).all())
        pending = conn.execute(sa.select(sa.func.count()).where(Card.stage_c_pending)).scalar_one()
    engine.dispose()
    assert per_card == {i: 1 for i in ids} and pending == 0


def _reserve_many(url: str, count: int, out: "multiprocessing.Queue[float]") -> None:
    engine = make_engine(url)
    for _ in range(count):
        out.put(reserve_slot(engine, "images.example.org", 20.0, now=5000.0))
    engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_pacer_slots_are_global_across_processes(backend: str, sqlite_url: str, request: pytest.FixtureRequest) -> None:
    url = sqlite_url if backend == "sqlite" else request.getfixturevalue("pg_url_fresh")
    ctx = multiprocessing.get_context("spawn")
    queue: "multiprocessing.Queue[float]" = ctx.Queue()
    procs = [ctx.Process(target=_reserve_many, args=(url, 6, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    slots = sorted(queue.get(timeout=60) for _ in range(18))
    for p in procs:
        p.join(60)
    # 18 requests from 3 processes at 20 per second take 0.85 s of slots, as one process would.
    assert all(b - a >= 0.05 - 1e-9 for a, b in zip(slots, slots[1:]))
    assert slots[-1] - slots[0] == pytest.approx(17 * 0.05)


def test_http_fetches_wait_for_their_slot(sqlite_engine: sa.Engine, image_host: str) -> None:
    import time

    with make_fetcher(sqlite_engine, [], [image_host.split("//", 1)[1]], rate_per_sec=10.0) as fetcher:
        started = time.perf_counter()
        results = [fetcher.fetch(f"{image_host}/card.jpg?i={i}") for i in range(5)]
        elapsed = time.perf_counter() - started
    assert [r.outcome for r in results] == ["ok"] * 5
    assert elapsed >= 0.4 - 0.02  # five requests at 10/s: the last starts 0.4 s after the first


@pytest.mark.slow
def test_worker_pool_covers_the_backlog_once(sqlite_url: str, tmp_path: Path) -> None:
    from stage_e_dagster.settings import Settings
    from stage_e_dagster.stage_c.pool import run_stage_c_pool

    engine = make_engine(sqlite_url)
    seed_corpus(engine, tmp_path, cards=10, seed=8, broken_share=0.2)
    settings = Settings(database_url=sqlite_url, image_roots=(tmp_path,))
    ticks: list[int] = []
    report = run_stage_c_pool(settings, None, workers=2, writer="bulk:pool", run_id=None, progress=ticks.append)
    assert (report.attempted, report.completed, sum(ticks)) == (10, 10, 10)
    with engine.connect() as conn:
        per_card = conn.execute(sa.select(sa.func.count(), sa.func.count(sa.distinct(ImageEvidence.card_id)))).one()
        pending = conn.execute(sa.select(sa.func.count()).where(Card.stage_c_pending)).scalar_one()
    engine.dispose()
    assert tuple(per_card) == (10, 10) and pending == 0
