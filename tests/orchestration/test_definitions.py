"""The code location loads, and the public names in docs/architecture.md are what it defines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DefaultSensorStatus, Definitions, DynamicPartitionsDefinition
from dagster._core.instance.ref import InstanceRef

from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML, PROJECT_ROOT, WORKSPACE_YAML


def test_definitions_are_loadable_and_name_the_public_parts() -> None:
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"stage_c_evidence", "stage_d_verdicts", "stage_e_envelope"}
    assert graph.get(AssetKey("stage_e_envelope")).group_name == "stage_e"
    assert {k.name for k in graph.asset_check_keys} == {"stage_c_batch_clean", "no_open_trip"}
    assert defs.resolve_job_def("acknowledge_trip").executor_def.name == "in_process"
    for name in keys - {"stage_e_envelope"}:
        node = graph.get(next(k for k in graph.get_all_asset_keys() if k.to_user_string() == name))
        assert node.group_name == "stage_e"
        assert isinstance(node.partitions_def, DynamicPartitionsDefinition)
        assert node.partitions_def.name == "micro_batches"
        assert node.pools == {"stage_e_dispatch"}
    job = defs.resolve_job_def("stage_e_dispatch")
    assert job.executor_def.name == "in_process"
    statuses = {s.name: s.default_status for s in defs.sensors}
    assert statuses == {
        "card_created_sensor": DefaultSensorStatus.RUNNING,
        "evidence_changed_sensor": DefaultSensorStatus.RUNNING,
        "envelope_trip_sensor": DefaultSensorStatus.RUNNING,
        "backstop_sweep_sensor": DefaultSensorStatus.STOPPED,
        "retention_sensor": DefaultSensorStatus.RUNNING,
    }


def test_the_embedded_instance_config_is_valid_and_sets_what_dispatch_relies_on(tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text(EMBEDDED_INSTANCE_YAML.read_text())
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path)))
    assert instance.run_monitoring_enabled
    assert instance.run_monitoring_max_runtime_seconds == 1800
    assert not instance.telemetry_enabled
    assert instance.get_concurrency_config().pool_config.pool_granularity.value == "run"
    assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
    assert instance.run_coordinator.dequeue_use_threads  # type: ignore[attr-defined]


@pytest.mark.slow
def test_workspace_yaml_loads_the_code_location(tmp_path: Path) -> None:
    env = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "DAGSTER_HOME": str(tmp_path),
        "STAGE_E_DATABASE_URL": f"sqlite:///{tmp_path / 'c.sqlite'}",
        "HOME": str(tmp_path),
    }
    (tmp_path / "dagster.yaml").write_text(EMBEDDED_INSTANCE_YAML.read_text())
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", str(WORKSPACE_YAML)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dispatch_and_envelope_sensors_tick_on_every_pass_of_the_sensor_daemon() -> None:
    """The daemon's pass takes at least ``MIN_INTERVAL_LOOP_TIME``; a minimum interval equal to it
    skips every tick that starts a little earlier in its pass than the last, halving the tick rate."""
    from dagster._daemon.sensor import MIN_INTERVAL_LOOP_TIME

    for name in ("card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor"):
        assert defs.resolve_sensor_def(name).minimum_interval_seconds < MIN_INTERVAL_LOOP_TIME, name


def test_backfill_runs_use_the_in_process_executor() -> None:
    """A sweep's runs execute as the implicit asset job: one process per run, as a dispatch run,
    not a subprocess per step (10-31 s each to start on a loaded machine)."""
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == "in_process"
