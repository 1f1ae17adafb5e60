"""Sensor ticks and dispatch runs on a real instance and catalogue: the streaming invariants."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from dagster import AssetKey, AssetRecordsFilter, SensorResult, SkipReason
from typer.testing import CliRunner

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, EnvelopeTrip, FetchOutcome, ImageEvidence, MicroBatch, PrintingVote
from stage_e_dagster.cli.main import app
from stage_e_dagster.defs.ledger import ledger_entries
from stage_e_dagster.dispatch.batch_rows import STAGE_C_FIELDS, STAGE_D_FIELDS
from stage_e_dagster.envelope.trips import acknowledge_trip, current_open_trip

from .conftest import ImageServer, Pipeline

LEDGER_NUMBERS = ("card_count", "attempt", "peak_rss_mb", "elapsed_s")


def counts(pipeline: Pipeline) -> dict[str, int]:
    with session_scope(pipeline.engine) as session:
        one = lambda q: session.execute(q).scalar_one()  # noqa: E731
        return {
            "cards": one(sa.select(sa.func.count()).select_from(Card)),
            "stage_c_pending": one(sa.select(sa.func.count()).select_from(Card).where(Card.stage_c_pending)),
            "stage_d_pending": one(sa.select(sa.func.count()).select_from(Card).where(Card.stage_d_pending)),
            "evidence": one(sa.select(sa.func.count()).select_from(ImageEvidence)),
            "votes": one(sa.select(sa.func.count()).select_from(PrintingVote)),
            "trips": one(sa.select(sa.func.count()).select_from(EnvelopeTrip)),
            "batches": one(sa.select(sa.func.count()).select_from(MicroBatch)),
        }


def skip_text(result: object) -> str:
    if isinstance(result, SkipReason):
        return result.skip_message or ""
    assert isinstance(result, SensorResult), result
    assert not result.run_requests, "expected a skip, got run requests"
    return result.skip_reason.skip_message if result.skip_reason else ""


def serve_first_card_over_http(pipeline: Pipeline, image_server: ImageServer) -> tuple[int, str]:
    """Point the first card at the test image server; returns its id and image name."""
    with pipeline.engine.begin() as conn:
        card_id, locator = conn.execute(sa.select(Card.id, Card.image_locator).order_by(Card.id).limit(1)).one()
        name = locator.split("/corpus/", 1)[1]
        conn.execute(sa.update(Card).where(Card.id == card_id).values(image_locator=f"{image_server.base}/{name}"))
    return card_id, name


def test_default_off_nothing_dispatches_and_a_run_refuses(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STAGE_E_STREAMING_ENABLED", raising=False)
    before = counts(pipeline)
    for name in ("card_created_sensor", "evidence_changed_sensor"):
        assert "streaming is off" in skip_text(pipeline.tick(name))
    # A dispatch run launched by hand refuses before any work.
    with session_scope(pipeline.engine) as session:
        session.add(MicroBatch(batch_key="mb-20260101T000000-0000000a", card_ids=[1, 2], trigger_reason="manual"))
    pipeline.instance.add_dynamic_partitions("micro_batches", ["mb-20260101T000000-0000000a"])
    result = pipeline.run("mb-20260101T000000-0000000a")
    assert result.success  # a refusal is no error: one warning line, no materialization, Stage D skipped
    assert any("streaming is off" in entry.user_message for entry in pipeline.instance.all_logs(result.run_id))
    assert not result.asset_materializations_for_node("stage_c_evidence")
    after = counts(pipeline)
    assert after["evidence"] == before["evidence"] == 0 and after["votes"] == 0
    with session_scope(pipeline.engine) as session:
        assert session.execute(sa.select(sa.func.count()).select_from(FetchOutcome)).scalar_one() == 0


def test_cards_from_any_writer_are_all_processed_with_a_numeric_ledger(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "4")
    # A writer that knows nothing of the pipeline adds two cards with raw SQL.
    with session_scope(pipeline.engine) as session:
        locator = session.execute(sa.select(Card.image_locator).order_by(Card.id).limit(1)).scalar_one()
    with pipeline.engine.begin() as conn:
        for n in range(2):
            conn.execute(
                sa.text("INSERT INTO cards (identifier, name, image_locator) VALUES (:i, :n, :l)"),
                {"i": f"raw-sql-{n}", "n": "Raw Card", "l": locator},
            )
    total = counts(pipeline)["cards"]
    run_ids = pipeline.drain()
    assert run_ids
    after = counts(pipeline)
    assert after["stage_c_pending"] == 0 and after["stage_d_pending"] == 0
    with session_scope(pipeline.engine) as session:
        with_evidence = session.execute(sa.select(sa.func.count(sa.distinct(ImageEvidence.card_id)))).scalar_one()
        assert with_evidence == total
        assert (
            session.execute(
                sa.select(sa.func.count()).select_from(MicroBatch).where(MicroBatch.status != "succeeded")
            ).scalar_one()
            == 0
        )
    for key, fields in ((AssetKey("stage_c_evidence"), STAGE_C_FIELDS), (AssetKey("stage_d_verdicts"), STAGE_D_FIELDS)):
        records = pipeline.instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=100).records
        assert len(records) == len(run_ids)
        for record in records:
            meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
            for name in (*fields, *LEDGER_NUMBERS):
                assert isinstance(meta[name], (int, float)), (name, meta[name])
            assert meta["trigger_reason"] == "card-created" and meta["lockout_trip_id"] == ""
        assert sum(r.asset_materialization.metadata["card_count"].value for r in records) == total
    # Re-ticking finds nothing: the dispatcher's own evidence writes never echo.
    assert "no unclaimed cards" in skip_text(pipeline.tick("card_created_sensor"))
    assert "no unclaimed cards" in skip_text(pipeline.tick("evidence_changed_sensor"))


def test_evidence_written_by_someone_else_goes_back_through_stage_d(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        card_id = session.execute(sa.select(ImageEvidence.card_id).order_by(ImageEvidence.id).limit(1)).scalar_one()
    with pipeline.engine.begin() as conn:  # a person corrects the evidence
        conn.execute(
            sa.update(Card).where(Card.id == card_id).values(stage_d_pending=True, evidence_writer="person:alice")
        )
    result = pipeline.tick("evidence_changed_sensor")
    assert isinstance(result, SensorResult) and len(result.run_requests) == 1
    request = result.run_requests[0]
    assert request.tags["stage_e/trigger_reason"] == "evidence-change"
    with session_scope(pipeline.engine) as session:
        assert session.get(MicroBatch, request.partition_key).card_ids == [card_id]
    evidence_before = counts(pipeline)["evidence"]
    assert pipeline.run(request.partition_key, tags=dict(request.tags)).success
    after = counts(pipeline)
    assert after["stage_d_pending"] == 0 and after["evidence"] == evidence_before


def test_a_403_trips_at_once_holds_every_tick_and_resumes_only_after_ack(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    # Serve every card over HTTP; the image host refuses the second card of the first batch.
    from .test_dispatch_invariants import batch as stored_batch  # it imports this module's helpers
    from .test_dispatch_invariants import serve_over_http

    names = dict(serve_over_http(pipeline, image_server))
    result = pipeline.tick("card_created_sensor")
    first = result.run_requests[0]
    image_server.status[names[stored_batch(pipeline, first.partition_key).card_ids[1]]] = 403
    outcome = pipeline.run(first.partition_key, tags=dict(first.tags))
    assert outcome.success  # Stage D still ran on the work in hand
    with session_scope(pipeline.engine) as session:
        trip = current_open_trip(session)
        assert trip is not None and trip.bar == "fetch_lockout"
        trip_id = trip.trip_id
    stage_d = pipeline.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("stage_d_verdicts")), limit=10
    ).records
    assert stage_d[0].asset_materialization.metadata["lockout_trip_id"].value == trip_id
    stage_c = (
        pipeline.instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("stage_c_evidence")), limit=10)
        .records[0]
        .asset_materialization.metadata
    )
    assert stage_c["stage_c_completed"].value == 1  # the first card; nothing after the 403 was fetched
    fetched = list(image_server.requests)

    # Several ticks: nothing new starts, and the skip names the trip.
    for _ in range(3):
        for name in ("card_created_sensor", "evidence_changed_sensor"):
            assert trip_id in skip_text(pipeline.tick(name))
    # A run that starts anyway (queued before the trip) refuses and does no work.
    assert len(result.run_requests) == 2
    second_request = result.run_requests[1]
    refused = pipeline.run(second_request.partition_key, tags=dict(second_request.tags))
    assert refused.success and not refused.asset_materializations_for_node("stage_c_evidence")
    assert any(trip_id in entry.user_message for entry in pipeline.instance.all_logs(refused.run_id))
    assert image_server.requests == fetched
    assert counts(pipeline)["trips"] == 1  # no self-resume, no second trip

    image_server.status.clear()
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="host unblocked us", by="ops")
    pipeline.tick("envelope_trip_sensor")  # abandons the refused batch so its cards come back
    pipeline.drain()
    final = counts(pipeline)
    assert final["stage_c_pending"] == 0 and final["stage_d_pending"] == 0
    with session_scope(pipeline.engine) as session:
        assert (
            session.execute(sa.select(sa.func.count(sa.distinct(ImageEvidence.card_id)))).scalar_one() == final["cards"]
        )


def test_a_429_defers_the_card_and_does_not_trip(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    card_id, name = serve_first_card_over_http(pipeline, image_server)
    image_server.status[name] = 429
    result = pipeline.tick("card_created_sensor")
    outcome = pipeline.run(result.run_requests[0].partition_key, tags=dict(result.run_requests[0].tags))
    assert outcome.success
    with session_scope(pipeline.engine) as session:
        assert current_open_trip(session) is None
        assert session.get(Card, card_id).stage_c_pending  # deferred, still waiting
        outcomes = (
            session.execute(sa.select(FetchOutcome.outcome).where(FetchOutcome.card_id == card_id)).scalars().all()
        )
        assert outcomes == ["throttled"]
    stage_c = (
        pipeline.instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("stage_c_evidence")), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    assert stage_c["stage_c_throttled"].value == 1 and stage_c["stage_c_fetch_failures"].value == 0
    assert "1 dispatch run(s) ended since the last tick; envelope within bars" in skip_text(
        pipeline.tick("envelope_trip_sensor")
    )
    with session_scope(pipeline.engine) as session:
        assert current_open_trip(session) is None


def test_a_host_the_settings_refuse_waits_on_configuration_visibly_until_the_settings_change(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", "images.example.org")
    card_id, name = serve_first_card_over_http(pipeline, image_server)
    for run_id in pipeline.drain():
        assert pipeline.instance.get_run_by_id(run_id).is_success
    with session_scope(pipeline.engine) as session:
        refused = session.get(Card, card_id)
        assert not refused.stage_c_pending and refused.next_eligible_at is None
        assert session.execute(sa.select(sa.func.count()).select_from(ImageEvidence)
                               .where(ImageEvidence.card_id == card_id)).scalar_one() == 0
    assert image_server.requests == []
    assert "no unclaimed cards" in skip_text(pipeline.tick("card_created_sensor"))  # left out of the backlog
    pipeline.tick("envelope_trip_sensor")
    [record] = pipeline.instance.fetch_observations(AssetKey("stage_e_envelope"), limit=1).records
    meta = record.asset_observation.metadata
    assert meta["waiting_on_configuration_hosts"].value == 1 and meta["waiting_on_configuration_roots"].value == 0
    assert meta["stage_c_waiting"].value == 0

    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", "images.example.org,127.0.0.1")  # the operator fixes it
    assert pipeline.drain()
    with session_scope(pipeline.engine) as session:
        fixed = session.get(Card, card_id)
        assert not fixed.stage_c_pending and fixed.config_refused_under is None
        assert session.execute(sa.select(sa.func.count()).select_from(ImageEvidence)
                               .where(ImageEvidence.card_id == card_id)).scalar_one() == 1
    assert image_server.requests == [name]


def test_a_batch_a_trip_stopped_early_reads_stopped_with_cards_done_of_cards_held(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    from .test_dispatch_invariants import batch as stored_batch  # it imports this module's helpers
    from .test_dispatch_invariants import serve_over_http

    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    names = dict(serve_over_http(pipeline, image_server))
    first = pipeline.tick("card_created_sensor").run_requests[0]
    image_server.status[names[stored_batch(pipeline, first.partition_key).card_ids[1]]] = 403  # the batch's second card
    assert pipeline.run(first.partition_key, tags=dict(first.tags)).success
    with session_scope(pipeline.engine) as session:
        trip = current_open_trip(session)
        batch = session.get(MicroBatch, first.partition_key)
        assert batch.status == "stopped"
        assert (batch.cards_done, len(batch.card_ids)) == (1, 3)
        assert batch.stopped_by_trip == trip.trip_id
    for asset in ("stage_c_evidence", "stage_d_verdicts"):
        [record] = pipeline.instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset)),
                                                            limit=1).records
        meta = record.asset_materialization.metadata
        assert (meta["cards_done"].value, meta["card_count"].value, meta["stopped_early"].value) == (1, 3, 1)
        assert meta["stopped_by_trip"].value == trip.trip_id
    [entry] = [e for e in ledger_entries(pipeline.instance) if e.batch_key == first.partition_key]
    assert entry.status == "stopped"
    listed = CliRunner().invoke(app, ["batches", "list", "--json"])
    [shown] = [b for b in json.loads(listed.output) if b["batch_key"] == first.partition_key]
    assert (shown["status"], shown["cards_done"], shown["card_count"]) == ("stopped", 1, 3)
