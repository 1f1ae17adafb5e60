"""Sensor heartbeats: every tick records the settings it ran with, and ``stage-e status`` shows them beside
the shell's own, warns where they differ and says when the daemon stopped ticking. Real sensor ticks on a
real instance and catalogue; the CLI through Typer's runner."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.heartbeats import is_stale, read_heartbeats, record_heartbeat
from stage_e_dagster.catalog.models import SensorHeartbeat
from stage_e_dagster.cli.main import app
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline

TICKING = ("card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor", "retention_sensor")


def heartbeats(pipeline: Pipeline) -> dict[str, SensorHeartbeat]:
    with session_scope(pipeline.engine) as session:
        return {beat.sensor_name: beat for beat in read_heartbeats(session)}


def status(*args: str):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, ["status", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result


def test_every_tick_records_the_settings_it_ran_with_and_never_the_database_url(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert heartbeats(pipeline) == {}
    for name in TICKING:
        pipeline.tick(name)  # streaming off: each skips and writes nothing, a heartbeat included
    assert heartbeats(pipeline) == {}

    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    for name in TICKING:
        pipeline.tick(name)
    first = heartbeats(pipeline)
    assert set(first) == set(TICKING)
    assert all(beat.settings["streaming_enabled"] is True for beat in first.values())
    assert first["card_created_sensor"].interval_s == 4 and first["retention_sensor"].interval_s == 60

    monkeypatch.setenv("STAGE_E_MAX_CONCURRENT_DISPATCHES", "3")
    pipeline.tick("card_created_sensor")
    beat = heartbeats(pipeline)["card_created_sensor"]
    assert beat.ticked_at > first["card_created_sensor"].ticked_at
    assert beat.settings["streaming_enabled"] is True and beat.settings["max_concurrent_dispatches"] == 3
    assert beat.settings["rss_mb_ceiling"] == 100000 and beat.settings["host_load_ceiling"] == 1000
    assert beat.governed_limit in (1, 2, 3)  # read as the tick begins: what the previous tick decided
    stored = json.dumps(beat.settings)
    assert "sqlite" not in stored and pipeline.url not in stored


def test_a_heartbeat_that_cannot_be_written_does_not_fail_the_tick(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    with pipeline.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE sensor_heartbeats"))
    result = pipeline.tick("card_created_sensor")
    assert result.run_requests  # the tick went on and dispatched the backlog


def test_an_older_tick_never_overwrites_a_newer_heartbeat(engine: sa.Engine) -> None:
    """The compare-and-set: a slow tick that began earlier but writes later leaves the newer row."""
    now = utcnow()
    newer = load_settings({"STAGE_E_STREAMING_ENABLED": "true"})
    older = load_settings({})
    with session_scope(engine) as session:
        record_heartbeat(session, "card_created_sensor", interval_s=5, settings=newer, pool="p", now=now)
    with session_scope(engine) as session:
        record_heartbeat(session, "card_created_sensor", interval_s=5, settings=older,
                         pool="p", now=now - timedelta(seconds=3))
    with session_scope(engine) as session:
        [beat] = read_heartbeats(session)
        assert beat.ticked_at == now and beat.settings["streaming_enabled"] is True
        record_heartbeat(session, "card_created_sensor", interval_s=5, settings=older,
                         pool="p", now=now + timedelta(seconds=5))
    with session_scope(engine) as session:
        [beat] = read_heartbeats(session)
        assert beat.ticked_at == now + timedelta(seconds=5) and beat.settings["streaming_enabled"] is False


def test_status_shows_the_daemons_settings_and_warns_where_the_shell_differs(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = status()
    assert "no sensor has ticked on this catalogue with streaming on" in before.output

    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")  # the daemon streams ...
    for name in TICKING:
        pipeline.tick(name)
    monkeypatch.delenv("STAGE_E_STREAMING_ENABLED")  # ... the operator's shell does not know it
    shown = status()
    assert "warning: streaming_enabled differs: the daemon runs with on, this shell has off" in shown.output
    assert "card_created_sensor" in shown.output and "stale" not in shown.output

    info = json.loads(status("--json").output)["running_system"]
    assert info["daemon_settings"]["streaming_enabled"] is True
    assert info["shell_settings"]["streaming_enabled"] is False
    assert info["differences"] == {"streaming_enabled": {"daemon": True, "shell": False}}
    assert {row["sensor"] for row in info["sensors"]} == set(TICKING) and info["stale"] == []

    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")  # the same settings: no warning
    assert "differs" not in status().output


def test_status_says_when_the_daemon_has_stopped_ticking(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    for name in TICKING:
        pipeline.tick(name)
    with pipeline.engine.begin() as conn:  # the last ticks were an hour ago: the daemon went away
        conn.execute(sa.update(SensorHeartbeat).values(ticked_at=utcnow() - timedelta(hours=1)))
    shown = status()
    assert ("warning: card_created_sensor has not ticked for 3600 s (more than 3 x its interval, counted as "
            "at least 10 s)") in shown.output
    info = json.loads(status("--json").output)["running_system"]
    assert set(info["stale"]) == set(TICKING)


def test_a_sensor_delayed_by_a_slow_pass_of_the_daemon_is_not_reported_stale() -> None:
    """A 4 s sensor shares the daemon's pass with the others: 20 s without a tick is a slow pass
    (a retention tick on a large instance), not a stopped daemon; a minute is."""
    now = utcnow()
    beat = SensorHeartbeat(sensor_name="card_created_sensor", interval_s=4, ticked_at=now - timedelta(seconds=20))
    assert not is_stale(beat, now)
    beat.ticked_at = now - timedelta(seconds=60)
    assert is_stale(beat, now)
