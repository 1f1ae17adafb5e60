"""The foundation commands through the real console entry point (db upgrade, status, trips), and what tables,
``--json`` and ``--help`` print."""

import json
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import typer
from typer.testing import CliRunner

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, EnvelopeTrip, MicroBatch
from stage_e_dagster.cli.context import catalog_engine
from stage_e_dagster.cli.main import app
from stage_e_dagster.cli.output import percent
from stage_e_dagster.dispatch.keys import new_batch_key
from stage_e_dagster.envelope.trips import open_trip


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


# Through Typer's runner: what the tables, --json and --help print.

runner = CliRunner()


@pytest.fixture
def upgraded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> sa.Engine:
    monkeypatch.setenv("STAGE_E_STATE_DIR", str(tmp_path / "state"))
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    return catalog_engine()


def _open_trips(engine: sa.Engine) -> list[str]:
    """Trips of both kinds: manual ones with long notes, and a bar's with its reading."""
    with session_scope(engine) as session:
        ids = [
            open_trip(session, "manual", {"note": "maintenance window for the image host " * 3}).trip_id,
            open_trip(session, "rss", {"observed": 2048.5, "ceiling": 512.0}, run_id=str(uuid.uuid4())).trip_id,
            open_trip(session, "manual", {"note": "x" * 120}).trip_id,
        ]
    return ids


def test_trips_list_prints_every_trip_id_whole_at_80_columns(upgraded: sa.Engine) -> None:
    ids = _open_trips(upgraded)
    out = runner.invoke(app, ["trips", "list"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert max(map(len, out.output.splitlines())) <= 80
    for trip_id in ids:
        assert trip_id in out.output, out.output
    wide = runner.invoke(app, ["trips", "list", "--wide"], env={"COLUMNS": "80"})
    assert all(trip_id in wide.output for trip_id in ids), wide.output
    with session_scope(upgraded) as session:
        run_id = session.execute(sa.select(EnvelopeTrip.run_id).where(EnvelopeTrip.run_id.is_not(None))).scalar_one()
    assert run_id in wide.output, wide.output


def test_trips_list_json_holds_the_rows_the_table_shows(upgraded: sa.Engine) -> None:
    ids = _open_trips(upgraded)
    listed = runner.invoke(app, ["trips", "list", "--json"])
    rows = json.loads(listed.output)
    assert [r["trip_id"] for r in rows] == list(reversed(ids))
    assert listed.output.startswith("[\n  {"), "pretty-printed"
    assert {r["bar"] for r in rows} == {"manual", "rss"}


def _record_batches(engine: sa.Engine, count: int) -> list[str]:
    now = datetime.now(timezone.utc)
    keys = [new_batch_key(now + timedelta(seconds=i), [i]) + "-r2" for i in range(count)]
    with session_scope(engine) as session:
        for i, key in enumerate(keys):
            session.add(MicroBatch(batch_key=key, card_ids=list(range(i * 10, i * 10 + 7)), trigger_reason="sweep",
                                   attempt=2, status="failed", run_id=str(uuid.uuid4()), created_at=now,
                                   failure_reason="the run worker was killed while Stage C fetched " * 4))
    return keys


def test_batches_list_prints_every_batch_key_whole_and_json_holds_the_same_rows(upgraded: sa.Engine) -> None:
    keys = _record_batches(upgraded, 3)
    out = runner.invoke(app, ["batches", "list"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert all(key in out.output for key in keys), out.output
    wide = runner.invoke(app, ["batches", "list", "--wide"], env={"COLUMNS": "80"})
    rows = json.loads(runner.invoke(app, ["batches", "list", "--json"]).output)
    assert {r["batch_key"] for r in rows} == set(keys)
    assert all(r["card_count"] == 7 and len(r["card_ids"]) == 7 for r in rows)
    assert all(r["run_id"] in wide.output for r in rows), wide.output


def test_a_piped_table_keeps_each_row_on_one_line(upgraded: sa.Engine) -> None:
    """Redirected to a file or a pager, Rich would fall back to 80 columns and fold every cell."""
    keys = _record_batches(upgraded, 2)
    out = runner.invoke(app, ["batches", "list"], env={"COLUMNS": None})
    assert out.exit_code == 0, out.output
    for key in keys:
        [line] = [line for line in out.output.splitlines() if key in line]
        assert "failed" in line and "sweep" in line and "the run worker was killed while Stage C" in line, out.output


def _command_paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under ``group`` (Typer's own click: a group is what has ``commands``)."""
    paths = [prefix]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            paths += _command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


def test_no_help_text_shows_a_bool_placeholder() -> None:
    root = typer.main.get_command(app)
    paths = _command_paths(root)
    assert ("trips", "list") in paths and ("demo",) in paths
    for path in paths:
        out = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert out.exit_code == 0, (path, out.output)
        assert "<bool>" not in out.output, (path, out.output)
    flags = runner.invoke(app, ["trips", "list", "--help"]).output
    assert "--open" in flags and "--json" in flags and "--wide" in flags


def test_bulk_ends_with_a_readable_summary(upgraded: sa.Engine) -> None:
    out = runner.invoke(app, ["bulk", "--stage", "d"])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert lines[0].startswith("bulk --stage d finished in ")
    assert lines[1].strip().startswith("Stage D: 0 cards considered, 0 join-key votes")
    assert "=" not in out.output and "{" not in out.output


@pytest.mark.parametrize(("fraction", "shown"), [(0.125, "12.5%"), (1.0, "100.0%"), (0.0, "0.0%"), (None, "-")])
def test_one_percentage_format(fraction: float | None, shown: str) -> None:
    assert percent(fraction) == shown


def test_status_counts_cards_waiting_on_configuration_apart_and_names_the_variable(upgraded: sa.Engine) -> None:
    with upgraded.begin() as conn:
        conn.execute(sa.insert(Card), [
            {"identifier": "waits", "name": "Waits", "image_locator": "http://images.example.org/1.jpg",
             "stage_c_pending": False, "config_refused_under": "0123456789abcdef",
             "config_refused_setting": "STAGE_E_FETCH_ALLOWED_HOSTS"},
            {"identifier": "pending", "name": "Pending", "image_locator": "file:///nowhere/2.jpg",
             "stage_c_pending": True, "config_refused_under": None, "config_refused_setting": None},
        ])
    info = json.loads(runner.invoke(app, ["status", "--json"]).output)
    assert info["stage_c_backlog"] == 1
    assert info["waiting_on_configuration"] == {"STAGE_E_FETCH_ALLOWED_HOSTS": 1}
    shown = runner.invoke(app, ["status"], env={"COLUMNS": "120"}).output
    assert "waiting on configuration" in shown and "1 card" in shown and "STAGE_E_FETCH_ALLOWED_HOSTS" in shown
