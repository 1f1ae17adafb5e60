"""``stage-e demo``: the headless main job drains its corpus, and the UI mode starts, refuses a taken port and
stops cleanly on SIGTERM and Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._core.utils import make_new_run_id

from stage_e_dagster.cli.demo import child_environment, is_idle, snapshot, still_held
from stage_e_dagster.defs.dagster_internals import BACKFILL_WAITS_FOR_ITS_LOCATION
from stage_e_dagster.stage_c.huge_pages import HUGE_PAGES_ON, TUNABLES_VARIABLE

from .conftest import free_port

STAGE_E = str(Path(sys.executable).parent / "stage-e")


[(BACKFILL_VARIABLE, _)] = BACKFILL_WAITS_FOR_ITS_LOCATION.items()


def _daemon_environment(root_pid: int, timeout_s: float = 120.0) -> dict[str, str]:
    """The environment of the ``dagster-daemon`` among ``root_pid``'s descendants, once it has started."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in psutil.Process(root_pid).children(recursive=True):
            try:
                command = " ".join(child.cmdline())
                if "dagster-daemon" in command or "dagster._daemon" in command:
                    return child.environ()
            except psutil.Error:
                continue
        time.sleep(1)
    raise AssertionError("no dagster-daemon process among the demo's children")


def test_the_headless_daemon_keeps_a_sweep_going_while_its_location_fails_to_load(tmp_path: Path) -> None:
    """The headless demo's daemon gets the same environment as ``dg dev`` (``child_environment``)."""
    from stage_e_dagster.settings import Settings

    env = child_environment(Settings(state_dir=tmp_path / "state"), tmp_path / "corpus")
    assert env[BACKFILL_VARIABLE] == "1" and env["STAGE_E_STREAMING_ENABLED"] == "true"
    assert HUGE_PAGES_ON in env[TUNABLES_VARIABLE].split(":")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
    env["STAGE_E_STATE_DIR"] = str(tmp_path / "state")
    return env


@pytest.mark.slow
def test_headless_demo_runs_until_idle_and_exits_zero(tmp_path: Path) -> None:
    result = subprocess.run(
        [STAGE_E, "demo", "--headless", "--until-idle", "--cards", "8", "--timeout", "240"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo idle after" in result.stdout and "8 cards" in result.stdout
    status = subprocess.run([STAGE_E, "status", "--json"], env=_env(tmp_path), capture_output=True, text=True)
    assert '"stage_c_backlog": 0' in status.stdout and '"streaming_enabled": false' in status.stdout


@pytest.mark.slow
def test_ui_demo_serves_the_ui_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [STAGE_E, "demo", "--cards", "4", "--port", str(port)],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "the UI did not come up"
                time.sleep(1)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children
        daemon_env = _daemon_environment(proc.pid)  # read while it runs, checked once everything stopped
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
        # Issue 40 item 1: the daemon dg dev starts keeps a sweep going while the location fails to load.
        assert daemon_env.get(BACKFILL_VARIABLE) == "1"
        # Issue 39: the code server it starts hands the huge-page tunable on to the run workers.
        assert HUGE_PAGES_ON in daemon_env.get(TUNABLES_VARIABLE, "").split(":")
    finally:
        if proc.poll() is None:  # dg dev runs in a process group of its own: its members are killed one by one
            descendants = psutil.Process(proc.pid).children(recursive=True)
            os.killpg(proc.pid, signal.SIGKILL)
            for child in descendants:
                try:
                    child.kill()
                except psutil.Error:
                    pass


def test_ui_demo_on_a_taken_port_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [STAGE_E, "demo", "--port", str(port)], env=_env(tmp_path), capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert result.stdout == ""  # refused before seeding or printing a URL
    assert not (tmp_path / "state" / "demo-corpus").exists()


def _wait_for_ui(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as response:
                assert response.status == 200
                return
        except OSError:
            assert proc.poll() is None, "the demo exited before its UI came up"
            assert time.monotonic() < deadline, "the UI did not come up"
            time.sleep(1)


@pytest.mark.slow
def test_ui_demo_starts_dg_dev_without_a_supersession_warning_and_stops_every_child_on_ctrl_c(
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [STAGE_E, "demo", "--cards", "4", "--port", str(port)],
            env=_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_ui(proc, port, 300)
        children = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        assert "dagster_webserver" in names and "dagster._daemon" in names and "code-server" in names, names
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
        assert proc.wait(timeout=180) == 0
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert "Traceback" not in output, output[-4000:]
    # `dg dev`, not `dagster dev`: no "Function `dev_command` is superseded" on every start.
    assert "SupersessionWarning" not in output and "superseded" not in output, output[:4000]
    assert "starting dg dev" in output and "dg dev stopped" in output


def test_the_demo_is_not_idle_until_every_run_has_ended(sqlite_engine: sa.Engine) -> None:
    """The catalogue reads idle a moment before the last run logs its materialization and ends; stopping
    the daemon's group then would kill that run and leave the ledger one micro-batch short."""
    instance = DagsterInstance.ephemeral()
    run = instance.add_run(
        DagsterRun(job_name="stage_e_dispatch", run_id=make_new_run_id(), status=DagsterRunStatus.STARTED)
    )
    finishing = snapshot(sqlite_engine, instance)
    assert finishing["stage_c_backlog"] == finishing["stage_d_backlog"] == finishing["in_flight"] == 0
    assert finishing["runs_in_progress"] == 1 and not is_idle(finishing)
    assert still_held(finishing) == "runs not ended 1"  # what a timeout says
    instance.report_run_failed(run)
    assert is_idle(snapshot(sqlite_engine, instance))
