"""A sensor evaluated as the code server evaluates it builds no Dagster instance of its own per tick.

The code server evaluates a sensor in a context made from the daemon's instance reference, with the
resources the sensor declares. A declared resource made Dagster build a new instance for every
evaluation, and a tick's calls on it opened its event log again; on SQLite each is an Alembic check
of the storages, most of a tick's CPU. ``defs/sensor_context.py`` builds one per process instead.
"""

from __future__ import annotations

from typing import Any

import pytest
from dagster import DagsterInstance, SensorEvaluationContext, build_sensor_context

from stage_e_dagster.definitions import defs
from stage_e_dagster.defs import sensor_context
from stage_e_dagster.defs.resources import LOCATION_RESOURCE, StageEResource
from stage_e_dagster.defs.sensor_context import sensor_instance, sensor_resource

from .conftest import Pipeline

EVERY_PASS = ("card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor")


def evaluate_as_the_code_server(instance: DagsterInstance, name: str, cursor: str | None) -> Any:
    """One evaluation the way ``dagster api grpc`` makes it: the instance as a reference, and only the
    resources the sensor declares."""
    repo = defs.get_repository_def()
    sensor = repo.get_sensor_def(name)
    declared = {k: v for k, v in repo.get_top_level_resources().items() if k in sensor.required_resource_keys}
    with SensorEvaluationContext(
        instance.get_ref(), last_tick_completion_time=None, last_run_key=None, cursor=cursor, log_key=None,
        repository_name=repo.name, repository_def=repo, sensor_name=name, resources=declared,
    ) as context:
        return sensor.evaluate_tick(context)


def test_ticks_in_one_code_server_build_one_instance(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setattr(sensor_context, "_by_ref", {})
    built: list[object] = []
    real_from_ref = DagsterInstance.from_ref

    def counted(ref):  # type: ignore[no-untyped-def]
        built.append(ref)
        return real_from_ref(ref)

    monkeypatch.setattr(DagsterInstance, "from_ref", staticmethod(counted))
    cursors: dict[str, str | None] = {}
    requested = []
    after_round: list[int] = []
    for _ in range(3):
        for name in EVERY_PASS:
            result = evaluate_as_the_code_server(pipeline.instance, name, cursors.get(name))
            assert not result.skip_message or "error" not in result.skip_message.lower(), result.skip_message
            cursors[name] = result.cursor
            requested += result.run_requests or []
        after_round.append(len(built))
    assert requested, "the seeded cards were never batched: the ticks did no work"
    # The first round builds the shared instance, and Dagster one more for a tick that logs (its
    # ``context.log`` writes through the context's own); the quiet rounds after it build none.
    assert after_round[2] == after_round[0], f"instances built by the end of each round: {after_round}"


def test_a_tests_context_keeps_its_own_instance_and_resource(pipeline: Pipeline) -> None:
    mine = StageEResource(database_url=pipeline.url)
    context = build_sensor_context(instance=pipeline.instance, resources={"stage_e": mine})
    assert sensor_instance(context) is pipeline.instance
    assert sensor_resource(context) == mine  # Dagster's initialised copy of it
    assert sensor_resource(build_sensor_context(instance=pipeline.instance)) is LOCATION_RESOURCE
