"""The dispatch invariants under faults, races, long waits and any writer, on a real instance and catalogue.

Each test names the item of issue 9 it pins. Runs execute in process (the same code a run worker runs).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import sqlalchemy as sa
from dagster import AssetKey, SensorResult

from stage_e_dagster.catalog import models
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, EnvelopeTrip, FetchOutcome, ImageEvidence, MicroBatch
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.run_queue import pool_limit
from stage_e_dagster.defs.tags import DISPATCH_POOL
from stage_e_dagster.envelope.trips import acknowledge_trip, open_trip
from stage_e_dagster.stage_c.manifest import MANIFEST_VERSIONS
from stage_e_dagster.stage_c.run import FETCH_AHEAD

from .conftest import ImageServer, Pipeline
from .test_streaming import counts, skip_text


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def requests_of(result: object) -> list:
    return list(result.run_requests) if isinstance(result, SensorResult) else []


def batch(pipeline: Pipeline, key: str) -> MicroBatch:
    with session_scope(pipeline.engine) as session:
        return session.get(MicroBatch, key)


def serve_over_http(pipeline: Pipeline, server: ImageServer) -> list[tuple[int, str]]:
    """Point every card at the test image server; returns (card id, image name) in id order."""
    with pipeline.engine.begin() as conn:
        rows = conn.execute(sa.select(Card.id, Card.image_locator).order_by(Card.id)).all()
        named = [(card_id, locator.split("/corpus/", 1)[1]) for card_id, locator in rows]
        for card_id, name in named:
            conn.execute(sa.update(Card).where(Card.id == card_id).values(image_locator=f"{server.base}/{name}"))
    return named


# 1. No lost cards -----------------------------------------------------------------------------


def test_a_card_whose_stage_d_never_ran_after_a_dispatch_stage_c_is_dispatched_again(pipeline: Pipeline) -> None:
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        first, second = session.execute(sa.select(Card.id).order_by(Card.id).limit(2)).scalars().all()
    # The state a cancelled retry leaves: the dispatcher wrote Stage C, no Stage D ever ran.
    with pipeline.engine.begin() as conn:
        conn.execute(
            sa.update(Card)
            .where(Card.id.in_([first, second]))
            .values(stage_d_pending=True, evidence_writer="dispatch:3f1c0ffee-cancelled-run")
        )
    [request] = requests_of(pipeline.tick("evidence_changed_sensor"))
    assert batch(pipeline, request.partition_key).card_ids == [first, second]
    # While that batch holds its cards, nothing else takes them: claims, not the last writer, stop echo.
    assert "no unclaimed cards" in skip_text(pipeline.tick("evidence_changed_sensor"))
    assert pipeline.run(request.partition_key, tags=dict(request.tags)).success
    assert counts(pipeline)["stage_d_pending"] == 0
    assert "no unclaimed cards" in skip_text(pipeline.tick("evidence_changed_sensor"))


def test_a_raw_sql_image_update_puts_the_card_back_through_stage_c(pipeline: Pipeline) -> None:
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        (card_id, old), (_, other) = session.execute(
            sa.select(Card.id, Card.image_locator).order_by(Card.id).limit(2)
        ).all()
        old_hash = session.get(Card, card_id).content_hash
    with pipeline.engine.begin() as conn:  # a writer that knows nothing of the pipeline
        conn.execute(sa.text("UPDATE cards SET image_locator = :l WHERE id = :i"), {"l": other, "i": card_id})
    [request] = requests_of(pipeline.tick("card_created_sensor"))
    assert batch(pipeline, request.partition_key).card_ids == [card_id]
    assert pipeline.run(request.partition_key, tags=dict(request.tags)).success
    with session_scope(pipeline.engine) as session:
        card = session.get(Card, card_id)
        assert card.image_locator == other and card.content_hash != old_hash and not card.stage_c_pending
        hashes = set(
            session.execute(sa.select(ImageEvidence.content_hash).where(ImageEvidence.card_id == card_id)).scalars()
        )
    assert hashes == {old_hash, card.content_hash}


def test_a_new_extractor_manifest_reextracts_the_stale_cards_by_itself(pipeline: Pipeline) -> None:
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        rows = (
            session.execute(
                sa.select(ImageEvidence).where(ImageEvidence.terminal.is_(False)).order_by(ImageEvidence.id)
            )
            .scalars()
            .all()
        )
        stale = [rows[0].card_id, rows[1].card_id]
        for row in rows[:2]:  # evidence the previous code wrote: an older art_phash extractor
            row.extractor_versions = dict(row.extractor_versions, art_phash="art-phash-v0")
            row.collector_number = "sentinel"  # a current field: carried forward, not recomputed
        rollout = session.get(models.ManifestRollout, "stage_c_manifest")
        assert rollout is not None and rollout.completed_at is not None
        rollout.manifest, rollout.completed_at = "fingerprint-of-the-previous-code", rollout.completed_at
    fetched_before = counts_fetches(pipeline)
    [request] = requests_of(pipeline.tick("card_created_sensor"))
    assert sorted(batch(pipeline, request.partition_key).card_ids) == sorted(stale)
    assert pipeline.run(request.partition_key, tags=dict(request.tags)).success
    with session_scope(pipeline.engine) as session:
        for card_id in stale:
            [row] = (
                session.execute(
                    sa.select(ImageEvidence)
                    .join(Card, Card.content_hash == ImageEvidence.content_hash)
                    .where(ImageEvidence.card_id == card_id, Card.id == card_id)
                )
                .scalars()
                .all()
            )
            assert row.extractor_versions == dict(MANIFEST_VERSIONS) and row.collector_number == "sentinel"
        assert session.get(models.ManifestRollout, "stage_c_manifest").completed_at is not None
    assert counts_fetches(pipeline) == fetched_before + 2
    assert "no unclaimed cards" in skip_text(pipeline.tick("card_created_sensor"))


def counts_fetches(pipeline: Pipeline) -> int:
    with session_scope(pipeline.engine) as session:
        return session.execute(sa.select(sa.func.count()).select_from(FetchOutcome)).scalar_one()


# 2. Default off, really off ---------------------------------------------------------------------


def test_a_second_run_of_a_finished_batch_refuses_without_fetching_or_touching_it(
    pipeline: Pipeline, image_server: ImageServer
) -> None:
    serve_over_http(pipeline, image_server)
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    assert pipeline.run(request.partition_key, tags=dict(request.tags)).success
    fetched = list(image_server.requests)
    again = pipeline.run(request.partition_key, tags=dict(request.tags))
    assert again.success and image_server.requests == fetched  # refused: no work, no error
    assert not again.asset_materializations_for_node("stage_c_evidence")
    done = batch(pipeline, request.partition_key)
    assert done.status == "succeeded" and done.failure_reason is None and done.run_id != again.run_id
    run = pipeline.instance.get_run_by_id(again.run_id)
    assert run.tags["stage_e/refused"] == "taken"
    pipeline.tick("envelope_trip_sensor")  # the refused run's end settles nothing of the batch
    assert batch(pipeline, request.partition_key).status == "succeeded"


# 3. One run per batch ---------------------------------------------------------------------------


def test_only_the_card_created_sensor_requests_a_waiting_retry(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    assert not pipeline.run_failing_in_stage_c(request.partition_key, dict(request.tags), monkeypatch).success
    pipeline.tick("envelope_trip_sensor")
    retry_key = request.partition_key + "-r2"
    assert batch(pipeline, retry_key).status == "pending"
    assert retry_key not in [r.partition_key for r in requests_of(pipeline.tick("evidence_changed_sensor"))]
    assert retry_key in [r.partition_key for r in requests_of(pipeline.tick("card_created_sensor"))]
    assert retry_key not in [r.partition_key for r in requests_of(pipeline.tick("card_created_sensor"))]


# 5. Run ends are never missed -------------------------------------------------------------------


def _two_failed_runs(pipeline: Pipeline, monkeypatch) -> list:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    requests = requests_of(pipeline.tick("card_created_sensor"))[:2]
    outcomes = []
    for request in requests:  # each run fails inside Stage C, after it took its batch
        outcomes.append(pipeline.run_failing_in_stage_c(request.partition_key, dict(request.tags), monkeypatch))
    assert [o.success for o in outcomes] == [False, False]
    return [(r.partition_key, o.run_id) for r, o in zip(requests, outcomes)]


def ledger_events(result: SensorResult) -> list:
    """The tick's ledger entries, without the envelope's own observation and check."""
    return [e for e in result.asset_events if e.asset_key != AssetKey("stage_e_envelope")]


def test_a_run_end_committed_after_a_newer_one_was_read_is_still_settled(pipeline: Pipeline, monkeypatch) -> None:
    ended = _two_failed_runs(pipeline, monkeypatch)
    records = {r.dagster_run.run_id: r.update_timestamp.timestamp() for r in pipeline.instance.get_run_records()}
    newest = max(records.values())
    # The sensor has already read a run end 30 s newer than both (its transaction committed first).
    pipeline.cursors["envelope_trip_sensor"] = json.dumps({"ts": newest + 30, "ids": ["a-newer-run"], "seen": {}})
    result = pipeline.tick("envelope_trip_sensor")
    settled = {event.partition for event in ledger_events(result)}
    assert settled == {key for key, _ in ended}
    for key, run_id in ended:
        assert batch(pipeline, key).status == "failed" and batch(pipeline, key).run_id == run_id
        assert batch(pipeline, key + "-r2").status == "pending"
    # Read again in the next tick's overlap window: settled once, no second ledger entry.
    assert ledger_events(pipeline.tick("envelope_trip_sensor")) == []


def test_the_dispatch_sensor_settles_run_ends_the_envelope_sensor_never_read(pipeline: Pipeline, monkeypatch) -> None:
    ended = _two_failed_runs(pipeline, monkeypatch)
    pipeline.cursors["envelope_trip_sensor"] = json.dumps({"ts": time.time() + 3600, "ids": [], "seen": {}})
    pipeline.tick("envelope_trip_sensor")
    result = pipeline.tick("card_created_sensor")
    assert all(batch(pipeline, key).status == "failed" for key, _ in ended)
    assert {r.partition_key for r in requests_of(result)} >= {key + "-r2" for key, _ in ended}
    # Their ledger entries went to the outbox with the settle; the envelope sensor reports them, once.
    assert {event.partition for event in ledger_events(pipeline.tick("envelope_trip_sensor"))} == {
        key for key, _ in ended
    }
    assert ledger_events(pipeline.tick("envelope_trip_sensor")) == []


# 7. One lockout, one trip, one ack ------------------------------------------------------------


def test_a_lockout_stops_the_other_run_in_flight_at_its_next_card(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "5")
    named = serve_over_http(pipeline, image_server)
    image_server.delay_s = 0.5
    requests = requests_of(pipeline.tick("card_created_sensor"))
    other = requests[1]
    other_cards = batch(pipeline, other.partition_key).card_ids
    images = {card_id: name for card_id, name in named}
    for card_id in other_cards[2:]:
        image_server.status[images[card_id]] = 403  # it would meet its own lockout if it went on
    outcome: dict[str, object] = {}
    worker = threading.Thread(target=lambda: outcome.update(r=pipeline.run(other.partition_key, tags=dict(other.tags))))
    worker.start()
    deadline = time.monotonic() + 240
    while not image_server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert image_server.requests, "the run never fetched"
    with session_scope(pipeline.engine) as session:  # the first run meets a 403 meanwhile
        trip_id = open_trip(session, "fetch_lockout", {"observed": 1, "ceiling": 0}, run_id="the-first-run").trip_id
    worker.join(timeout=300)
    assert outcome["r"].success
    fetched = [name for name in image_server.requests if name in {images[c] for c in other_cards}]
    # The card in hand and at most FETCH_AHEAD fetched ahead of it (how far the thread got depends
    # on how long the card in hand took): never a card beyond those.
    in_reach = [images[c] for c in other_cards[:1 + FETCH_AHEAD]]
    assert fetched and set(fetched) <= set(in_reach), (fetched, in_reach)
    with session_scope(pipeline.engine) as session:
        trips = session.execute(sa.select(EnvelopeTrip.trip_id)).scalars().all()
    assert trips == [trip_id]


# 11. An operator's pool limit is theirs ---------------------------------------------------------


def test_an_operators_pool_limit_survives_ticks_and_a_hold(pipeline: Pipeline) -> None:
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2  # the setting, applied once
    pipeline.instance.event_log_storage.set_concurrency_slots(DISPATCH_POOL, 5)  # dagster instance concurrency set
    for name in ("card_created_sensor", "evidence_changed_sensor", "card_created_sensor"):
        pipeline.tick(name)
        assert pool_limit(pipeline.instance) == 5
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="ops")
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 5


def test_a_hold_on_a_pool_with_no_limit_of_its_own_gives_the_default_back(pipeline: Pipeline) -> None:
    """Before any tick the pool runs on the instance's ``default_limit``: a hold must not leave it at 0."""
    assert pool_limit(pipeline.instance) is None
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "before the first tick"}).trip_id
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="ops")
    assert requests_of(pipeline.tick("card_created_sensor"))
    assert pool_limit(pipeline.instance) == 2


def test_a_pool_whose_limit_was_deleted_gets_the_setting_again(pipeline: Pipeline) -> None:
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2
    pipeline.instance.event_log_storage.delete_concurrency_limit(DISPATCH_POOL)  # a new or reset instance
    with session_scope(pipeline.engine) as session:  # the catalogue still says what it applied before
        session.execute(sa.text("DELETE FROM card_claims"))
    assert requests_of(pipeline.tick("card_created_sensor"))
    assert pool_limit(pipeline.instance) == 2


# 8. An attempt is spent only by a run that took its batch ---------------------------------------


def _fail_at_launch(pipeline: Pipeline, partition_key: str, tags: dict[str, str]) -> str:
    """A run the queue could not launch (the code server was down): created for the batch, then marked
    failed from outside, as Dagster's run queue does, without a line of our code having run."""
    job = defs.resolve_job_def("stage_e_dispatch")
    run = pipeline.instance.create_run_for_job(
        job,
        tags={**tags, "dagster/partition": partition_key},
        asset_selection=frozenset(job.asset_layer.executable_asset_keys),
    )
    pipeline.instance.report_run_failed(run, "Caught an unrecoverable error while dequeuing the run: UNAVAILABLE")
    return run.run_id


def test_a_run_that_failed_before_taking_its_batch_spends_no_attempt(pipeline: Pipeline) -> None:
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    key = request.partition_key
    for number in (2, 3, 4, 5):  # longer than the attempts allowed: no card may be parked for it
        _fail_at_launch(pipeline, key, dict(request.tags))
        pipeline.tick("envelope_trip_sensor")
        assert batch(pipeline, key).status == "pending" and batch(pipeline, key).attempt == 1
        again = [r for r in requests_of(pipeline.tick("card_created_sensor")) if r.partition_key == key]
        assert [r.run_key for r in again] == [f"{key}@{number}"]
    assert pipeline.run(key, tags=dict(again[0].tags)).success
    assert batch(pipeline, key).status == "succeeded"
    with session_scope(pipeline.engine) as session:
        assert session.execute(sa.select(MicroBatch).where(MicroBatch.batch_key.like(f"{key}-r%"))).first() is None
