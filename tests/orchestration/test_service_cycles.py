"""``scripts/service_cycles.py``, short: the UI demo, the headless daemon, then the UI demo stopped with a
dispatch run going, each started and stopped as a user does (issue 40 item 6; the script runs 50 cycles
by default): no abort, no process left, no traceback of ours in their logs.

One kind of traceback is let through, by name: ``[dagster-race]``, Dagster 1.13.27's daemon closing its
workspace before its daemons' thread pools (``stage_e_dagster/service_logs.py``). The sensors no longer
tick in such a pool (the second test), but the run queue's dequeue pool can still launch a run there at
the stop of the cycle with a run going. The script still counts it and exits 1 on it; every other
problem fails here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML, PROJECT_ROOT
from stage_e_dagster.process_groups import start_group, wait_group_gone
from stage_e_dagster.service_logs import bad_lines

pytestmark = pytest.mark.slow

SCRIPT = PROJECT_ROOT / "scripts" / "service_cycles.py"
BIN = Path(sys.executable).parent


def test_the_services_start_and_stop_three_times_without_an_abort_or_a_process_left(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "3", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=1800)
    cycles = [line for line in done.stdout.splitlines() if line.startswith("cycle ")]
    assert len(cycles) == 3, done.stdout[-4000:] + done.stderr[-4000:]
    assert re.search(r"^cycle +1/3 ui +SIGINT ", done.stdout, re.M), done.stdout
    assert re.search(r"^cycle +2/3 headless +SIGINT ", done.stdout, re.M), done.stdout
    assert re.search(r"^cycle +3/3 ui +SIGTERM +runs going at the stop [1-9]", done.stdout, re.M), done.stdout
    kinds = {kind for line in cycles for kind in re.findall(r"\[([a-z-]+)\] ", line)}
    assert kinds <= {"dagster-race"}, done.stdout
    assert all(" exit 0 " in line for line in cycles), done.stdout
    assert done.returncode == (1 if kinds else 0), done.stdout + done.stderr[-4000:]
    assert re.search(r"^3 cycles in .* \(UI demo 2, headless daemon 1; stopped with a run going [1-9]", done.stdout,
                     re.M), done.stdout


# A sensor whose evaluation is still going when the daemon is stopped, and which then asks for a run:
# the run request sends the daemon back to its workspace for the code location after the stop began.
SLOW_SENSOR = '''
import os, time
from pathlib import Path
from dagster import DefaultSensorStatus, Definitions, RunRequest, job, op, sensor

@op
def nothing():
    pass

@job
def noop():
    nothing()

@sensor(job=noop, minimum_interval_seconds=1, default_status=DefaultSensorStatus.RUNNING)
def slow_sensor(context):
    Path(os.environ["TICK_STARTED"]).touch()
    time.sleep(4)
    return RunRequest(run_key=str(time.time()))

defs = Definitions(jobs=[noop], sensors=[slow_sensor])
'''


def test_a_stop_during_a_sensor_tick_leaves_no_traceback_with_the_shipped_sensor_settings(tmp_path: Path) -> None:
    """The daemon stopped while a sensor evaluates, with the ``sensors:`` settings every instance file ships
    (``tests/foundation/test_deployment.py`` holds them equal): it exits 0 with a clean log.

    In a thread pool (``use_threads: true``) the tick outlives the daemon's join of its threads and asks the
    closed workspace, or the already shut submit pool, to go on (a traceback every time); in the daemon's
    own thread the daemon waits for the evaluation and drops the tick at its next yield, before the close.
    """
    home = tmp_path / "home"
    home.mkdir()
    sensors = yaml.safe_load(EMBEDDED_INSTANCE_YAML.read_text())["sensors"]
    # No run launches (the queue holds them): only the sensor daemon's stop is under test.
    (home / "dagster.yaml").write_text(yaml.safe_dump({
        "telemetry": {"enabled": False}, "sensors": sensors, "run_queue": {"max_concurrent_runs": 0},
    }))
    code = tmp_path / "slow_sensor.py"
    code.write_text(SLOW_SENSOR)
    started = tmp_path / "tick-started"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
    env |= {"DAGSTER_HOME": str(home), "TICK_STARTED": str(started)}
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        daemon = start_group([str(BIN / "dagster-daemon"), "run", "-f", str(code)], env=env, stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not started.exists():
            assert daemon.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        daemon.send_signal(signal.SIGINT)
        assert daemon.wait(timeout=120) == 0, log.read_text(errors="replace")
        assert wait_group_gone(daemon.pid, 30), "a process of the daemon's group was left"
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    text = log.read_text(errors="replace")
    assert "Daemon threads shut down." in text, text[-3000:]
    assert not bad_lines(text), text[-6000:]
