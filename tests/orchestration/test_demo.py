"""``stage-e demo``: the headless main job drains its corpus, and the UI mode starts and stops cleanly."""

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

pytestmark = pytest.mark.slow

STAGE_E = str(Path(sys.executable).parent / "stage-e")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
    env["STAGE_E_STATE_DIR"] = str(tmp_path / "state")
    return env


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_demo_serves_the_ui_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
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
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
