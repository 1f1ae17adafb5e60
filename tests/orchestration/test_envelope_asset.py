"""The envelope in the UI: the sensor's observation of ``stage_e_envelope``, its ``no_open_trip`` check,
and the per-batch warning check on ``stage_c_evidence``, all read back from a real instance."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa
import yaml
from dagster import AssetCheckKey, AssetCheckSeverity, AssetKey, FloatMetadataValue, IntMetadataValue, UrlMetadataValue

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, CardClaim, EnvelopeTrip
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs import envelope_asset
from stage_e_dagster.defs.checks import NO_OPEN_TRIP, STAGE_C_BATCH_CLEAN, no_open_trip
from stage_e_dagster.defs.envelope_asset import ENVELOPE_KEY, READINGS
from stage_e_dagster.defs.instance import WORKSPACE_YAML
from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
from stage_e_dagster.envelope.trips import acknowledge_trip, open_trip

from .conftest import ImageServer, Pipeline
from .test_dispatch_invariants import batch, serve_over_http

TRIP_CHECK = AssetCheckKey(asset_key=ENVELOPE_KEY, name=NO_OPEN_TRIP)
BATCH_CHECK = AssetCheckKey(asset_key=AssetKey("stage_c_evidence"), name=STAGE_C_BATCH_CLEAN)


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def latest_reading(pipeline: Pipeline) -> dict[str, object]:
    """The newest stored observation of the envelope, as the UI reads it."""
    [record] = pipeline.instance.fetch_observations(ENVELOPE_KEY, limit=1).records
    return dict(record.asset_observation.metadata)


def pending(pipeline: Pipeline, column: sa.ColumnElement[bool]) -> int:
    with session_scope(pipeline.engine) as session:
        return session.execute(sa.select(sa.func.count()).select_from(Card).where(column)).scalar_one()


def trip_check_history(pipeline: Pipeline):  # type: ignore[no-untyped-def]
    """Evaluations of no_open_trip, newest first, with their stored evaluation."""
    records = pipeline.instance.event_log_storage.get_asset_check_execution_history(TRIP_CHECK, limit=50)
    return [(r, r.event.dagster_event.event_specific_data) for r in records]


def observe_at_next_tick(pipeline: Pipeline) -> None:
    """Rewind the sensor's memory of its last observation, as if ``OBSERVE_EVERY_S`` had passed."""
    cursor = json.loads(pipeline.cursors["envelope_trip_sensor"])
    cursor["observed"] = 0.0
    pipeline.cursors["envelope_trip_sensor"] = json.dumps(cursor)


def test_ticks_closer_than_the_observation_interval_observe_once(pipeline: Pipeline) -> None:
    for _ in range(3):
        pipeline.tick("envelope_trip_sensor")
    assert len(pipeline.instance.fetch_observations(ENVELOPE_KEY, limit=10).records) == 1
    observe_at_next_tick(pipeline)
    pipeline.tick("envelope_trip_sensor")
    assert len(pipeline.instance.fetch_observations(ENVELOPE_KEY, limit=10).records) == 2


def test_each_tick_observes_every_reading_as_a_number_with_the_backlogs_counted(pipeline: Pipeline) -> None:
    pipeline.tick("envelope_trip_sensor")
    meta = latest_reading(pipeline)
    assert set(meta) == set(READINGS)
    assert all(isinstance(value, (IntMetadataValue, FloatMetadataValue)) for value in meta.values()), meta
    values = {key: value.value for key, value in meta.items()}
    assert values["stage_c_waiting"] == pending(pipeline, Card.stage_c_pending) == 10
    assert values["stage_d_waiting"] == pending(pipeline, Card.stage_d_pending)
    assert values["open_trips"] == 0 and values["pool_held"] == 0 and values["fetch_lockout_open"] == 0
    assert values["fetch_failure_rate_ceiling"] == 0.01 and values["fetch_failure_window"] == 500
    assert values["rss_mb_ceiling"] == 100000 and values["host_load_ceiling"] == 1000
    assert values["governed_concurrency"] == values["max_concurrent_dispatches"] == 2
    assert values["oldest_waiting_age_s"] >= 0 and values["sensor_lag_s"] == 0  # no previous tick


def test_claimed_cards_leave_the_waiting_count_and_a_drained_backlog_reads_zero(
    pipeline: Pipeline, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    requests = pipeline.tick("card_created_sensor").run_requests  # two batches of three claimed
    with session_scope(pipeline.engine) as session:
        claimed = session.execute(sa.select(sa.func.count()).select_from(CardClaim)).scalar_one()
    assert claimed == 3 * len(requests) == 6
    pipeline.tick("envelope_trip_sensor")
    assert latest_reading(pipeline)["stage_c_waiting"].value == 10 - claimed

    for request in requests:
        pipeline.run(request.partition_key, tags=dict(request.tags))
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        record_fetch_outcome(session, "failed", status_code=500)
    observe_at_next_tick(pipeline)
    pipeline.tick("envelope_trip_sensor")
    values = {key: value.value for key, value in latest_reading(pipeline).items()}
    assert values["stage_c_waiting"] == values["stage_d_waiting"] == 0
    assert values["oldest_waiting_age_s"] == 0
    assert values["worker_rss_mb"] > 0  # the newest succeeded batch's peak
    assert values["fetch_failures_in_window"] == 1 and values["fetch_failure_rate"] == 1 / 500


def test_a_backlog_is_counted_only_up_to_the_bound(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setattr(envelope_asset, "BACKLOG_COUNT_BOUND", 4)
    pipeline.tick("envelope_trip_sensor")
    meta = latest_reading(pipeline)
    assert meta["stage_c_waiting"].value == 4 and meta["backlog_count_bound"].value == 4
    assert pending(pipeline, Card.stage_c_pending) == 10


def test_sensor_lag_is_the_time_since_the_previous_tick(pipeline: Pipeline) -> None:
    pipeline.tick("envelope_trip_sensor")
    cursor = json.loads(pipeline.cursors["envelope_trip_sensor"])
    cursor["tick"] = time.time() - 90  # as if the daemon had been away a minute and a half
    cursor["observed"] = cursor["tick"]
    pipeline.cursors["envelope_trip_sensor"] = json.dumps(cursor)
    pipeline.tick("envelope_trip_sensor")
    assert latest_reading(pipeline)["sensor_lag_s"].value >= 90


def test_the_check_fails_naming_the_trip_while_it_is_open_and_passes_after_the_ack(pipeline: Pipeline) -> None:
    pipeline.tick("envelope_trip_sensor")
    [(first, evaluation)] = trip_check_history(pipeline)
    assert first.status.value == "SUCCEEDED" and evaluation.passed

    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance window"}).trip_id
    for _ in range(3):  # evaluated when the answer changes, not again on every tick
        pipeline.tick("envelope_trip_sensor")
    history = trip_check_history(pipeline)
    assert len(history) == 2
    record, evaluation = history[0]
    assert record.status.value == "FAILED" and not evaluation.passed
    assert evaluation.severity == AssetCheckSeverity.ERROR
    assert trip_id in evaluation.description and "manual" in evaluation.description
    assert f"stage-e trips ack {trip_id} --note" in evaluation.description
    assert evaluation.metadata["trip_id"].value == trip_id and evaluation.metadata["bar"].value == "manual"
    assert latest_reading(pipeline)["open_trips"].value == 1

    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="maintenance done", by="ops")
    pipeline.tick("envelope_trip_sensor")
    record, evaluation = trip_check_history(pipeline)[0]
    assert record.status.value == "SUCCEEDED" and evaluation.passed
    assert latest_reading(pipeline)["open_trips"].value == 0


def test_a_failure_rate_trip_turns_the_check_red_on_the_tick_that_opens_it(pipeline: Pipeline) -> None:
    with session_scope(pipeline.engine) as session:
        for _ in range(6):  # one over the bar of a 500-outcome window at 1%
            record_fetch_outcome(session, "failed", status_code=404)
    pipeline.tick("envelope_trip_sensor")
    _, evaluation = trip_check_history(pipeline)[0]
    assert not evaluation.passed and evaluation.metadata["bar"].value == "fetch_failure_rate"
    assert "observed 6.0 over ceiling 5.0" in evaluation.description


def test_executing_the_check_from_the_ui_gives_the_sensors_answer(pipeline: Pipeline) -> None:
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "paused"}).trip_id
    result = no_open_trip(stage_e=pipeline.resource())
    assert not result.passed and result.metadata["trip_id"].value == trip_id


def batch_check_of_run(pipeline: Pipeline, run_id: str):  # type: ignore[no-untyped-def]
    records = pipeline.instance.event_log_storage.get_asset_check_execution_history(BATCH_CHECK, limit=20)
    [record] = [r for r in records if r.run_id == run_id]
    return record, record.event.dagster_event.event_specific_data


def test_a_batch_with_a_failed_fetch_warns_and_a_clean_batch_passes(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "5")
    names = dict(serve_over_http(pipeline, image_server))
    first, second = pipeline.tick("card_created_sensor").run_requests
    image_server.status[names[batch(pipeline, first.partition_key).card_ids[1]]] = 500  # one card of the first batch
    dirty = pipeline.run(first.partition_key, tags=dict(first.tags))
    clean = pipeline.run(second.partition_key, tags=dict(second.tags))
    assert dirty.success and clean.success  # the run itself is green either way

    record, evaluation = batch_check_of_run(pipeline, dirty.run_id)
    assert record.status.value == "FAILED" and not evaluation.passed
    assert evaluation.severity == AssetCheckSeverity.WARN
    assert evaluation.metadata["stage_c_fetch_failures"].value == 1
    assert "1 host fetch failure(s)" in evaluation.description
    ledger = dirty.asset_materializations_for_node("stage_c_evidence")[0].metadata
    assert ledger["stage_c_fetch_failures"].value == 1

    record, evaluation = batch_check_of_run(pipeline, clean.run_id)
    assert record.status.value == "SUCCEEDED" and evaluation.passed
    assert evaluation.metadata["stage_c_fetch_failures"].value == 0
    assert evaluation.metadata["stage_c_terminal"].value == 0


def test_the_failing_check_links_to_the_ack_launchpad_with_the_trip_id_in_its_config(pipeline: Pipeline) -> None:
    """The link opens the acknowledge job's launchpad (the UI's ``playground/setup`` route copies its
    ``config`` parameter into the editor); the config it carries, with a note added, acknowledges the trip."""
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance window"}).trip_id
    pipeline.tick("envelope_trip_sensor")
    _, evaluation = trip_check_history(pipeline)[0]
    link = evaluation.metadata["ack_launchpad"]
    assert isinstance(link, UrlMetadataValue)
    url = urlsplit(link.url)
    with open(WORKSPACE_YAML, encoding="utf-8") as workspace:
        location = yaml.safe_load(workspace)["load_from"][0]["python_module"]["location_name"]
    assert url.path == f"/locations/{location}/jobs/acknowledge_trip/playground/setup"
    [config_text] = parse_qs(url.query)["config"]
    config = yaml.safe_load(config_text)
    assert config == {"ops": {"acknowledge_trip_op": {"config": {"trip_id": trip_id}}}}

    config["ops"]["acknowledge_trip_op"]["config"]["note"] = "maintenance done"  # what the person types
    result = defs.resolve_job_def("acknowledge_trip").execute_in_process(run_config=config, instance=pipeline.instance)
    assert result.success
    with session_scope(pipeline.engine) as session:
        assert session.query(EnvelopeTrip).filter_by(trip_id=trip_id).one().acknowledged_at is not None


def test_a_passing_check_has_no_ack_link(pipeline: Pipeline) -> None:
    pipeline.tick("envelope_trip_sensor")
    _, evaluation = trip_check_history(pipeline)[0]
    assert evaluation.passed and "ack_launchpad" not in evaluation.metadata


def test_the_envelope_is_an_observed_asset_and_observe_takes_one_reading_now(pipeline: Pipeline) -> None:
    """The UI calls an observable asset observed (its latest observation) instead of "Never materialized";
    Observe stores the same keys a sensor tick does, the sensor's lag read from its heartbeat."""
    node = defs.resolve_asset_graph().get(ENVELOPE_KEY)
    assert node.is_observable and not node.is_materializable
    assert node.description.startswith("Observed, never materialized")
    pipeline.tick("envelope_trip_sensor")  # the heartbeat the lag is measured from
    result = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={ENVELOPE_KEY}).execute_in_process(
        instance=pipeline.instance, resources={"stage_e": pipeline.resource()}
    )
    assert result.success
    reading = latest_reading(pipeline)
    assert set(reading) == set(READINGS)
    assert reading["sensor_lag_s"].value >= 0 and reading["open_trips"].value == 0
