"""``acknowledge_trip``: a person's launch acknowledges through the CLI's function and dispatch resumes;
automation's launch refuses and the trip stays open; a wrong trip id is a named outcome."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from dagster import AssetCheckKey, ExecuteInProcessResult

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import EnvelopeTrip
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.checks import NO_OPEN_TRIP
from stage_e_dagster.defs.envelope_asset import ENVELOPE_KEY
from stage_e_dagster.defs.instance import PROJECT_ROOT, WORKSPACE_YAML
from stage_e_dagster.defs.run_queue import pool_limit
from stage_e_dagster.envelope.trips import acknowledge_trip, current_open_trip, open_trip
from stage_e_dagster.process_groups import start_group, stop_group

from .conftest import Pipeline, free_port
from .test_daemon import BIN, Stack
from .test_streaming import skip_text


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def manual_trip(pipeline: Pipeline) -> str:
    with session_scope(pipeline.engine) as session:
        return open_trip(session, "manual", {"note": "maintenance"}).trip_id


def launch_ack(
    pipeline: Pipeline, trip_id: str, note: str = "host checked", tags: dict[str, str] | None = None
) -> ExecuteInProcessResult:
    return defs.resolve_job_def("acknowledge_trip").execute_in_process(
        run_config={"ops": {"acknowledge_trip_op": {"config": {"trip_id": trip_id, "note": note}}}},
        instance=pipeline.instance,
        tags=tags or {},
        raise_on_error=False,
    )


def failure_of(result: ExecuteInProcessResult) -> tuple[str, str]:
    """(the Failure's description, its ack_outcome) from the failed run."""
    [event] = result.get_step_failure_events()
    failure = event.step_failure_data.user_failure_data
    return failure.description, failure.metadata["ack_outcome"].value


def stored(pipeline: Pipeline, trip_id: str) -> EnvelopeTrip:
    with session_scope(pipeline.engine) as session:
        trip = session.query(EnvelopeTrip).filter_by(trip_id=trip_id).one()
        session.expunge(trip)
        return trip


def test_a_person_acknowledges_from_the_launchpad_and_dispatch_resumes(pipeline: Pipeline) -> None:
    trip_id = manual_trip(pipeline)
    assert trip_id in skip_text(pipeline.tick("card_created_sensor"))
    assert pool_limit(pipeline.instance) == 0

    result = launch_ack(pipeline, trip_id, note="  maintenance done  ", tags={"dagster/user": "alice@example.com"})
    assert result.success
    trip = stored(pipeline, trip_id)
    assert trip.acknowledged_at is not None
    assert trip.acknowledged_by == "alice@example.com" and trip.acknowledged_note == "maintenance done"
    [output] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert output.step_output_data.metadata["ack_outcome"].value == "acknowledged"

    # The check turned green from the job itself, before any sensor ticked.
    latest = pipeline.instance.get_latest_asset_check_evaluation_record(
        AssetCheckKey(asset_key=ENVELOPE_KEY, name=NO_OPEN_TRIP)
    )
    assert latest is not None and latest.event.dagster_event.event_specific_data.passed

    resumed = pipeline.tick("card_created_sensor")
    assert resumed.run_requests and pool_limit(pipeline.instance) == 2


def test_without_a_user_tag_the_run_id_is_recorded(pipeline: Pipeline) -> None:
    trip_id = manual_trip(pipeline)
    result = launch_ack(pipeline, trip_id)
    assert result.success
    assert stored(pipeline, trip_id).acknowledged_by == f"run {result.run_id}"


@pytest.mark.parametrize(
    "tags",
    [
        {"dagster/sensor_name": "some_sensor"},
        {"dagster/schedule_name": "nightly"},
        {"dagster/backfill": "abcdefgh"},
        {"dagster/from_automation_condition": "true"},
    ],
    ids=["sensor", "schedule", "backfill", "automation-condition"],
)
def test_a_run_launched_by_automation_refuses_and_the_trip_stays_open(pipeline: Pipeline, tags: dict[str, str]) -> None:
    trip_id = manual_trip(pipeline)
    result = launch_ack(pipeline, trip_id, tags={**tags, "dagster/user": "alice@example.com"})
    assert not result.success
    description, outcome = failure_of(result)
    assert outcome == "refused_automation"
    assert "only a person may acknowledge" in description and next(iter(tags)) in description
    assert stored(pipeline, trip_id).acknowledged_at is None
    with session_scope(pipeline.engine) as session:
        assert current_open_trip(session).trip_id == trip_id
    assert trip_id in skip_text(pipeline.tick("card_created_sensor"))


def test_an_ack_that_matches_no_open_trip_is_a_named_outcome(pipeline: Pipeline) -> None:
    result = launch_ack(pipeline, "envtrip-19700101T000000-00000000")
    assert not result.success
    description, outcome = failure_of(result)
    assert outcome == "trip_not_found" and "envtrip-19700101T000000-00000000" in description

    trip_id = manual_trip(pipeline)
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="done from the CLI", by="bob")
    again = launch_ack(pipeline, trip_id)
    assert failure_of(again)[1] == "already_acknowledged"
    assert stored(pipeline, trip_id).acknowledged_by == "bob"  # the first ack stands


def test_an_empty_note_is_refused_and_changes_nothing(pipeline: Pipeline) -> None:
    trip_id = manual_trip(pipeline)
    result = launch_ack(pipeline, trip_id, note="   ")
    assert failure_of(result)[1] == "empty_note"
    assert stored(pipeline, trip_id).acknowledged_at is None


def test_the_launchpad_requires_trip_id_and_note_and_shows_an_example_that_acknowledges_nothing(
    pipeline: Pipeline,
) -> None:
    job = defs.resolve_job_def("acknowledge_trip")
    ops = job.run_config_schema.config_type.fields["ops"]
    fields = ops.config_type.fields["acknowledge_trip_op"]
    config = fields.config_type.fields["config"].config_type.fields
    assert config["trip_id"].is_required and config["note"].is_required
    # The launchpad's editor starts from this instead of `{}`: the fields to fill, and no real trip.
    assert ops.default_value == {
        "acknowledge_trip_op": {"config": {"trip_id": "envtrip-PASTE-THE-OPEN-TRIP-ID", "note": ""}}
    }
    trip_id = manual_trip(pipeline)
    unchanged = job.execute_in_process(instance=pipeline.instance, raise_on_error=False)
    assert failure_of(unchanged)[1] == "empty_note"  # and its trip id names no trip
    assert stored(pipeline, trip_id).acknowledged_at is None


# Through the UI's own API -------------------------------------------------------------------------

OBSERVATIONS = """
query Envelope($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) {
    ... on Asset {
      assetObservations(limit: 1) {
        metadataEntries { label ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } }
      }
    }
  }
}"""
CHECK_EXECUTIONS = """
query Checks($key: AssetKeyInput!) {
  assetCheckExecutions(assetKey: $key, checkName: "no_open_trip", limit: 1) {
    runId status evaluation { success severity description }
  }
}"""
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
RUN_STATUS = """
query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""


class Webserver:
    """``dagster-webserver`` on the stack's instance and workspace, queried as the UI queries it."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        with open(log, "ab") as out:
            self.process = start_group(
                [str(BIN / "dagster-webserver"), "-w", str(WORKSPACE_YAML), "-h", "127.0.0.1", "-p", str(self.port)],
                env=env,
                cwd=PROJECT_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def graphql(self, query: str, **variables: object) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        assert "errors" not in body, body
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        stop_group(self.process)


@pytest.mark.slow
def test_the_ui_api_shows_the_envelope_red_during_a_trip_and_green_after_the_ack_job(
    sqlite_url: str, tmp_path: Path
) -> None:
    # An empty catalogue: the daemon's sensors tick for real, and no dispatch run competes.
    stack = Stack(tmp_path, sqlite_url, tmp_path)
    with session_scope(stack.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "UI drill"}).trip_id
    key = {"path": ["stage_e_envelope"]}
    server = Webserver(stack.env, tmp_path / "webserver.log")
    stack.start()
    try:
        stack.wait_until(server.ready, timeout_s=180, what="the webserver to answer")

        def latest_check() -> dict | None:
            executions = server.graphql(CHECK_EXECUTIONS, key=key)["assetCheckExecutions"]
            return executions[0] if executions else None

        def red() -> bool:
            check = latest_check()
            return check is not None and check["status"] == "FAILED"

        stack.wait_until(red, timeout_s=180, what="the daemon's envelope sensor to fail no_open_trip")
        evaluation = latest_check()["evaluation"]
        assert not evaluation["success"] and evaluation["severity"] == "ERROR"
        assert trip_id in evaluation["description"] and f"stage-e trips ack {trip_id}" in evaluation["description"]
        [observation] = server.graphql(OBSERVATIONS, key=key)["assetOrError"]["assetObservations"]
        readings = {e["label"]: e.get("intValue", e.get("floatValue")) for e in observation["metadataEntries"]}
        assert readings["open_trips"] == 1 and readings["stage_c_waiting"] == 0
        assert all(isinstance(value, (int, float)) for value in readings.values()), readings

        params = {
            "selector": {
                "repositoryLocationName": "stage_e_dagster",
                "repositoryName": "__repository__",
                "jobName": "acknowledge_trip",
            },
            "runConfigData": {"ops": {"acknowledge_trip_op": {"config": {"trip_id": trip_id, "note": "drill over"}}}},
        }
        launched = server.graphql(LAUNCH, params=params)["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        def run_ended() -> bool:
            status = server.graphql(RUN_STATUS, id=run_id)["runOrError"].get("status")
            return status in ("SUCCESS", "FAILURE", "CANCELED")

        stack.wait_until(run_ended, timeout_s=240, what="the acknowledge_trip run to end")
        assert server.graphql(RUN_STATUS, id=run_id)["runOrError"]["status"] == "SUCCESS"
        check = latest_check()
        assert check["status"] == "SUCCEEDED" and check["evaluation"]["success"]
        with session_scope(stack.engine) as session:
            trip = session.query(EnvelopeTrip).filter_by(trip_id=trip_id).one()
            assert trip.acknowledged_by == f"run {run_id}" and trip.acknowledged_note == "drill over"
    finally:
        stack.stop()
        server.stop()
