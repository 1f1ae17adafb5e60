"""The foundation commands through the real console entry point: db upgrade, status, trips."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


def stage_e(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": "/usr/bin:/bin", "STAGE_E_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", "from stage_e_dagster.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def test_status_refuses_an_unmigrated_catalogue_then_works_after_db_upgrade(tmp_path: Path) -> None:
    before = stage_e(tmp_path, "status")
    assert before.returncode == 1
    assert "run `stage-e db upgrade`" in before.stderr and before.stderr.count("\n") == 1
    up = stage_e(tmp_path, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    assert "upgraded empty ->" in up.stdout
    again = stage_e(tmp_path, "db", "upgrade")
    assert "already at" in again.stdout
    status = stage_e(tmp_path, "status", "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["streaming_enabled"] is False
    assert info["open_trip"] is None
    assert info["stage_c_backlog"] == 0 and info["stage_d_backlog"] == 0
    assert info["envelope"]["fetch_failures"]["ceiling"] == 5.0


def test_manual_trip_pause_and_acknowledge_round_trip(tmp_path: Path) -> None:
    assert stage_e(tmp_path, "db", "upgrade").returncode == 0
    opened = stage_e(tmp_path, "trips", "open", "--note", "db maintenance", "--by", "ops")
    assert opened.returncode == 0, opened.stderr
    listed = json.loads(stage_e(tmp_path, "trips", "list", "--open", "--json").stdout)
    assert [t["bar"] for t in listed] == ["manual"]
    trip_id = listed[0]["trip_id"]
    assert json.loads(stage_e(tmp_path, "status", "--json").stdout)["open_trip"]["trip_id"] == trip_id

    empty_note = stage_e(tmp_path, "trips", "ack", trip_id, "--note", " ")
    assert empty_note.returncode == 1 and "non-empty --note" in empty_note.stderr
    unknown = stage_e(tmp_path, "trips", "ack", "envtrip-nope", "--note", "x")
    assert unknown.returncode == 1 and "no trip with id" in unknown.stderr

    acked = stage_e(tmp_path, "trips", "ack", trip_id, "--note", "maintenance over", "--by", "ops")
    assert acked.returncode == 0 and trip_id in acked.stdout
    twice = stage_e(tmp_path, "trips", "ack", trip_id, "--note", "again")
    assert twice.returncode == 1 and "already acknowledged" in twice.stderr
    assert json.loads(stage_e(tmp_path, "trips", "list", "--open", "--json").stdout) == []


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"STAGE_E_MICRO_BATCH_SIZE": "abc"}, "STAGE_E_MICRO_BATCH_SIZE='abc' is not a whole number"),
        ({"STAGE_E_RSS_MB_CEILING": "-1"}, "STAGE_E_RSS_MB_CEILING='-1' must be at least 0"),
        ({"STAGE_E_DATABASE_URL": "mysql://x/y"}, "unsupported database URL scheme"),
    ],
)
def test_bad_settings_fail_at_start_with_one_line(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    result = stage_e(tmp_path, "status", env=env)
    assert result.returncode == 1
    assert needle in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_usage_errors_exit_non_zero(tmp_path: Path) -> None:
    result = stage_e(tmp_path, "trips", "ack")
    assert result.returncode == 2
    assert "Missing argument" in result.stderr
