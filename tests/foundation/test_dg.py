"""The project is a ``dg`` project: ``dg check defs``, ``dg list defs`` and ``dg launch`` work in a checkout,
through [tool.dg] in pyproject.toml, and name the code location's parts."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from stage_e_dagster.defs.launchpad import CODE_LOCATION, ack_run_config
from stage_e_dagster.instance_files import DG_TOML, INSTANCE_YAML, WORKSPACE_YAML, read_instance_file

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / INSTANCE_YAML).write_text(read_instance_file(INSTANCE_YAML))
    return {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DAGSTER_HOME": str(home),
        "STAGE_E_STATE_DIR": str(tmp_path / "state"),
        "STAGE_E_DATABASE_URL": f"sqlite:///{tmp_path / 'catalog.sqlite'}",
    }


def run(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=PROJECT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=timeout)


def test_the_dg_project_the_workspace_and_the_shipped_dg_toml_name_one_code_location() -> None:
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    project = pyproject["tool"]["dg"]["project"]
    assert pyproject["tool"]["dg"]["directory_type"] == "project"
    assert project["code_location_target_module"] == "stage_e_dagster.definitions"
    shipped = tomllib.loads(read_instance_file(DG_TOML))
    assert shipped["project"] == project and shipped["directory_type"] == "project"
    [entry] = yaml.safe_load(read_instance_file(WORKSPACE_YAML))["load_from"]
    assert project["code_location_name"] == entry["python_module"]["location_name"] == CODE_LOCATION
    assert "dagster-dg-cli==1.13.27" in pyproject["project"]["dependencies"]


@pytest.mark.slow
def test_dg_check_defs_and_dg_list_defs_pass_in_the_checkout(tmp_path: Path) -> None:
    checked = run(tmp_path, "dg", "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully." in checked.stdout
    assert "Warning" not in checked.stdout + checked.stderr, checked.stdout + checked.stderr

    listed = run(tmp_path, "dg", "list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert {a["asset_key"] for a in found["assets"]} == {"stage_c_evidence", "stage_d_verdicts", "stage_e_envelope"}
    assert {j["name"] for j in found["jobs"]} == {"stage_e_dispatch", "acknowledge_trip"}
    assert {s["name"] for s in found["sensors"]} >= {
        "card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor"
    }


@pytest.mark.slow
def test_dg_launch_runs_the_ack_job_and_clears_the_trip(tmp_path: Path) -> None:
    assert run(tmp_path, "stage-e", "db", "upgrade").returncode == 0
    opened = run(tmp_path, "stage-e", "trips", "open", "--note", "drill")
    assert opened.returncode == 0, opened.stderr
    [trip] = json.loads(run(tmp_path, "stage-e", "trips", "list", "--open", "--json").stdout)
    config = ack_run_config(trip["trip_id"], note="drill over")
    launched = run(tmp_path, "dg", "launch", "--job", "acknowledge_trip", "--config-json", json.dumps(config))
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    assert json.loads(run(tmp_path, "stage-e", "trips", "list", "--open", "--json").stdout) == []
