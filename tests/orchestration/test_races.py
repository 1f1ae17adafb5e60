"""Two evaluators at once (two daemons on one instance, or ``dagster dev`` beside a daemon) on PostgreSQL.

Dagster only logs a warning when two daemons tick the same sensors, so the catalogue must make it
safe: claims taken ``FOR UPDATE SKIP LOCKED``, and every request a compare-and-set. The ticks
below really run at the same moment (a barrier), each in its own thread and transaction.
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa
from dagster import SensorResult, build_sensor_context, instance_for_test

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import make_engine, session_scope
from stage_e_dagster.catalog.models import Card, FetchOutcome, ImageEvidence, MicroBatch
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.dispatch.batches import fail_and_retry

from .conftest import INSTANCE_OVERRIDES, Pipeline

pytestmark = pytest.mark.postgres

CARDS = 40


@pytest.fixture
def pg_pipeline(
    pg_url_fresh: str, corpus_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Pipeline]:
    shutil.copy(corpus_template / "catalog.sqlite", tmp_path / "template.sqlite")
    template = make_engine(f"sqlite:///{tmp_path / 'template.sqlite'}")
    with template.connect() as conn:
        locators = conn.execute(sa.select(Card.image_locator).order_by(Card.id)).scalars().all()
    template.dispose()
    engine = make_engine(pg_url_fresh)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(Card),
            [
                {"identifier": f"race-{i}", "name": f"Race {i}", "image_locator": locators[i % len(locators)]}
                for i in range(CARDS)
            ],
        )
    for name, value in {
        "STAGE_E_DATABASE_URL": pg_url_fresh,
        "STAGE_E_STATE_DIR": str(tmp_path / "state"),
        "STAGE_E_IMAGE_ROOTS": str(corpus_template / "corpus"),
        "STAGE_E_HOST_LOAD_CEILING": "1000",
        "STAGE_E_CPU_PRESSURE_CEILING": "100",
        "STAGE_E_RSS_MB_CEILING": "100000",
        "STAGE_E_STREAMING_ENABLED": "true",
        "STAGE_E_MICRO_BATCH_SIZE": "4",
        "STAGE_E_MAX_CONCURRENT_DISPATCHES": "8",
    }.items():
        monkeypatch.setenv(name, value)
    with instance_for_test(overrides=INSTANCE_OVERRIDES) as instance:
        yield Pipeline(url=pg_url_fresh, engine=engine, instance=instance, images=corpus_template / "corpus")
    engine.dispose()


def race(pipeline: Pipeline, names: list[str]) -> list[SensorResult]:
    """Evaluate the sensors at the same moment, one thread each; returns what each tick asked for."""
    barrier = threading.Barrier(len(names))
    results: list[object] = [None] * len(names)
    errors: list[BaseException] = []

    def tick(i: int, name: str) -> None:
        context = build_sensor_context(
            instance=pipeline.instance, resources={"stage_e": pipeline.resource()}, definitions=defs
        )
        barrier.wait()
        try:
            results[i] = defs.resolve_sensor_def(name)(context)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=tick, args=(i, n)) for i, n in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    out = [r for r in results if isinstance(r, SensorResult)]
    for result in out:
        for request in result.dynamic_partitions_requests or []:
            pipeline.instance.add_dynamic_partitions(micro_batches.name, list(request.partition_keys))
    return out


def cards_of(pipeline: Pipeline, keys: list[str]) -> list[int]:
    with session_scope(pipeline.engine) as session:
        return [cid for key in keys for cid in session.get(MicroBatch, key).card_ids]


def test_racing_ticks_never_request_one_card_twice_and_each_image_is_fetched_once(pg_pipeline: Pipeline) -> None:
    pipeline = pg_pipeline
    with pipeline.engine.begin() as conn:  # half the cards wait for both stages: both sensors want them
        conn.execute(sa.update(Card).where(Card.id % 2 == 0).values(stage_d_pending=True))
    requests = []
    for _ in range(3):
        for result in race(pipeline, ["card_created_sensor", "card_created_sensor", "evidence_changed_sensor"]):
            requests += list(result.run_requests)
    keys = [r.partition_key for r in requests]
    assert len(keys) == len(set(keys)), "one batch requested twice"
    claimed = cards_of(pipeline, keys)
    assert len(claimed) == len(set(claimed)) == CARDS, Counter(claimed).most_common(3)

    # A batch whose run failed before taking it: its retry waits, unrequested, and two reconciling
    # ticks see it at once. It is requested once.
    done = requests.pop()
    with session_scope(pipeline.engine) as session:
        outcome = fail_and_retry(
            session,
            session.get(MicroBatch, done.partition_key),
            reason="RuntimeError: start-up crash",
            now=utcnow(),
            max_attempts=3,
            claim_ttl_s=900,
        )
        assert outcome.retry is not None and outcome.retry.request_count == 0
    again = [r for result in race(pipeline, ["card_created_sensor"] * 2) for r in result.run_requests]
    assert [r.partition_key for r in again].count(done.partition_key + "-r2") == 1
    requests += again

    # Every run requested, even a duplicate if there were one, runs: no card is fetched twice.
    job = defs.resolve_job_def("stage_e_dispatch")
    for request in requests:
        job.execute_in_process(
            partition_key=request.partition_key, instance=pipeline.instance, raise_on_error=False, tags=request.tags
        )
    with session_scope(pipeline.engine) as session:
        fetches = Counter(session.execute(sa.select(FetchOutcome.card_id)).scalars())
        evidence = Counter(session.execute(sa.select(ImageEvidence.card_id)).scalars())
    assert set(fetches) == set(range(1, CARDS + 1)) and max(fetches.values()) == 1, fetches.most_common(3)
    assert max(evidence.values()) == 1


def test_a_watch_whose_card_another_transaction_holds_stops_after_the_empty_create(
    pg_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 8: the probe sees a card whose row another transaction holds, and the claim's
    ``SKIP LOCKED`` passes it by. The tick stops watching after that empty create instead of probing
    and creating again every quarter second until its watch runs out."""
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "2")
    with pg_pipeline.engine.begin() as conn:
        held = conn.execute(sa.select(sa.func.max(Card.id))).scalar_one()
        conn.execute(sa.update(Card).where(Card.id != held).values(stage_c_pending=False))
    import stage_e_dagster.defs.sensors.dispatching as dispatching

    real_wait, probes = dispatching.wait_for_work, []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        probes.append(real_wait(*args, **kwargs))
        return probes[-1]

    monkeypatch.setattr(dispatching, "wait_for_work", counted)
    with pg_pipeline.engine.connect() as holder:
        holder.begin()
        holder.execute(sa.select(Card.id).where(Card.id == held).with_for_update())
        result = pg_pipeline.tick("card_created_sensor")
        holder.rollback()
    assert isinstance(result, SensorResult) and not result.run_requests
    assert probes == [True], f"the watch probed {len(probes)} times for a card it could not claim"
