"""An idle ``card_created_sensor`` tick watches for new cards before it returns (``dispatch.arrivals``).

Real ticks on a real instance and catalogue; the card lands from another thread while the tick
watches. No test here bounds a duration from above: only "it watched at least this long".
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import DagsterRun, DagsterRunStatus, SensorResult

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, MicroBatch
from stage_e_dagster.defs.tags import dispatch_tags
from stage_e_dagster.dispatch.batches import record_batch, split_tail, take_batch
from stage_e_dagster.envelope.trips import open_trip
from stage_e_dagster.settings import load_settings

from ..factories import insert_cards
from .conftest import Pipeline
from .test_streaming import skip_text


@pytest.fixture
def idle(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    """Streaming on, the seeded backlog drained: the next tick has nothing to batch."""
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        assert not session.execute(sa.select(Card.id).where(Card.stage_c_pending)).first()
    return pipeline


def land_later(pipeline: Pipeline, delay_s: float, *, trip: bool = False) -> tuple[threading.Thread, list[int]]:
    """Insert one readable card after ``delay_s`` (opening a manual trip first, given ``trip``)."""
    with pipeline.engine.connect() as conn:
        locator = conn.execute(sa.select(Card.image_locator).order_by(Card.id).limit(1)).scalar_one()
    landed: list[int] = []

    def insert() -> None:
        time.sleep(delay_s)
        if trip:
            with session_scope(pipeline.engine) as session:
                open_trip(session, "manual", {"note": "test: a person stops dispatch while the tick watches"})
        landed.extend(insert_cards(pipeline.engine, 1, prefix="arrival", locator=locator))

    thread = threading.Thread(target=insert)
    thread.start()
    return thread, landed


def record_watches(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replace the watch with a recorder: each call's ``until``, and nothing ever found."""
    watched: list[float] = []

    def record(engine: sa.Engine, predicate: object, *, until: float) -> bool:
        watched.append(until)
        return False

    monkeypatch.setattr("stage_e_dagster.defs.sensors.dispatching.wait_for_work", record)
    return watched


def test_a_card_landing_while_an_idle_tick_watches_is_batched_by_that_tick(
    idle: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "4")
    thread, landed = land_later(idle, 0.5)
    result = idle.tick("card_created_sensor")
    thread.join()
    assert isinstance(result, SensorResult) and len(result.run_requests) == 1, result
    request = result.run_requests[0]
    with session_scope(idle.engine) as session:
        batch = session.get(MicroBatch, request.partition_key)
        assert batch is not None and batch.card_ids == landed
    assert result.cursor == str(landed[0])  # the seed cursor moved past the new card, as a normal tick's does
    # The batch runs like any other: the card gets its evidence.
    assert idle.run(request.partition_key, tags=dict(request.tags)).success


def test_an_idle_tick_watches_its_whole_window_then_says_nothing_waits(
    idle: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "1.5")
    started = time.monotonic()
    text = skip_text(idle.tick("card_created_sensor"))
    assert time.monotonic() - started >= 1.5
    assert "no unclaimed cards waiting" in text


def test_a_trip_opened_while_the_tick_watches_holds_the_card_that_landed(
    idle: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "4")
    thread, landed = land_later(idle, 0.5, trip=True)
    text = skip_text(idle.tick("card_created_sensor"))
    thread.join()
    assert "trip" in text and "open" in text, text
    with session_scope(idle.engine) as session:
        batched = [cid for (ids,) in session.execute(sa.select(MicroBatch.card_ids)) for cid in ids]
    assert landed[0] not in batched


def test_only_an_idle_card_created_tick_watches(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "4")
    watched = record_watches(monkeypatch)
    first = pipeline.tick("card_created_sensor")  # the seeded backlog: batches at once, no watch
    assert isinstance(first, SensorResult) and first.run_requests
    pipeline.tick("evidence_changed_sensor")  # the Stage D sensor never watches
    assert watched == []
    assert "no unclaimed cards waiting" in skip_text(pipeline.tick("card_created_sensor"))  # every card claimed: idle
    assert len(watched) == 1


def test_with_every_slot_running_an_idle_tick_does_not_watch(idle: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    """A card landing then would wait for a slot anyway; the next tick batches it in time."""
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "4")
    watched = record_watches(monkeypatch)
    tags = dispatch_tags(load_settings(), trigger_reason="card-created")
    runs = [idle.instance.add_run(DagsterRun(job_name="stage_e_dispatch", run_id=str(uuid.uuid4()),
                                             status=DagsterRunStatus.STARTED, tags=tags)) for _ in range(2)]
    idle.tick("card_created_sensor")  # the cap is 2 (the pipeline's setting): both slots are taken
    assert watched == []
    idle.instance.report_run_failed(runs[0])  # one slot frees: the tick watches again
    idle.tick("card_created_sensor")
    assert len(watched) == 1


def test_the_watchs_probe_reads_beside_a_writer_without_taking_sqlites_write_lock(idle: Pipeline) -> None:
    """Issue 31 item 8: a probe every quarter second must not queue behind (or hold up) another
    process's write transaction on SQLite: it reads under WAL with a deferred BEGIN."""
    from stage_e_dagster.catalog.backlog import STAGE_C_PENDING
    from stage_e_dagster.dispatch.arrivals import wait_for_work

    found: list[bool] = []
    with idle.engine.connect() as writer:
        writer.begin()  # BEGIN IMMEDIATE: the write lock, held
        writer.execute(sa.update(Card).where(Card.id == -1).values(stage_c_pending=True))
        probe = threading.Thread(target=lambda: found.append(
            wait_for_work(idle.engine, STAGE_C_PENDING, until=time.monotonic() + 0.5)))
        probe.start()
        probe.join(timeout=20)  # the write lock's busy timeout is 30 s
        alive = probe.is_alive()
        writer.rollback()
    probe.join()
    assert not alive and found == [False], "the read-only probe waited for the write lock"


def test_a_card_landing_after_the_last_slot_filled_during_the_watch_is_left_for_the_queue(
    idle: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 8: the tick plans the card that landed with the runs going now, not with those it
    read before it started watching: a run that took the last slot meanwhile leaves no room for it."""
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "4")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "1")  # slots are the cap less the runs going
    tags = dispatch_tags(load_settings(), trigger_reason="card-created")

    def started_run() -> None:
        idle.instance.add_run(DagsterRun(job_name="stage_e_dispatch", run_id=str(uuid.uuid4()),
                                         status=DagsterRunStatus.STARTED, tags=tags))

    started_run()  # one of the cap's two slots: the idle tick watches
    with idle.engine.connect() as conn:
        locator = conn.execute(sa.select(Card.image_locator).order_by(Card.id).limit(1)).scalar_one()

    def fill_then_land() -> None:
        time.sleep(0.5)
        started_run()  # the last slot fills while the tick watches
        insert_cards(idle.engine, 1, prefix="arrival", locator=locator)

    thread = threading.Thread(target=fill_then_land)
    thread.start()
    result = idle.tick("card_created_sensor")
    thread.join()
    assert not getattr(result, "run_requests", None), "the tick batched a card for a slot that was taken"
    assert "2 dispatch run(s) queued or going" in skip_text(result)


def test_a_tail_split_off_while_an_idle_tick_watches_is_requested_by_that_tick(
    idle: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that hands its tail to the free slot (``dispatch.tail``) leaves the new batch pending and
    unrequested. The tick watching that slot requests it before it returns, not a daemon pass later.
    The split is made as the watch begins, so the tick's first reconcile cannot have seen it."""
    import stage_e_dagster.defs.sensors.dispatching as dispatching

    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "4")
    with idle.engine.connect() as conn:
        locator = conn.execute(sa.select(Card.image_locator).order_by(Card.id).limit(1)).scalar_one()
    ids = insert_cards(idle.engine, 6, prefix="splitting", locator=locator)
    now = utcnow()
    with session_scope(idle.engine) as session:  # a batch a run holds: no Dagster run, so a slot is free
        batch = record_batch(session, ids, trigger_reason="card-created", now=now, claim_ttl_s=600)
        assert batch is not None
        key = batch.batch_key
        assert take_batch(session, key, run_id="run-1", now=now, lease_until=now + timedelta(hours=1))
    real_wait, split = dispatching.wait_for_work, []

    def split_then_watch(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not split:
            with session_scope(idle.engine) as session:
                new = split_tail(session, key, run_id="run-1", tail=ids[4:], now=utcnow(), claim_ttl_s=600)
                assert new is not None
                split.append(new.batch_key)
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(dispatching, "wait_for_work", split_then_watch)
    result = idle.tick("card_created_sensor")
    assert isinstance(result, SensorResult), result
    assert [request.partition_key for request in result.run_requests] == split
    with session_scope(idle.engine) as session:
        row = session.get(MicroBatch, split[0])
        assert (row.status, row.card_ids, row.request_count) == ("pending", ids[4:], 1)
        assert session.get(MicroBatch, key).status == "running"  # the batch it came from runs on
