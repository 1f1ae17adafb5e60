"""``failure_reason_of`` on real runs: the user's exception, not Dagster's wrapper; a dead worker said plainly.

The first tests execute runs in process. The slow ones launch a run through a real code server with the
default run launcher and kill its worker (SIGKILL, an exit code, SIGTERM), as an OOM kill or an eviction would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest
from dagster import AssetsDefinition, DagsterEventType, DagsterInstance, DagsterRunStatus, Failure, asset, materialize

from stage_e_dagster.code_server import code_server_answers
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.defs.run_failures import MAX_REASON_CHARS, WORKER_DIED, failure_reason_of
from stage_e_dagster.process_groups import start_group, stop_group

from .conftest import Pipeline, free_port

BIN = Path(sys.executable).parent


def test_a_stage_c_exception_gives_the_users_exception_not_dagsters_wrapper(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    pipeline.instance.add_dynamic_partitions(micro_batches.name, ["ghost-batch"])  # no batch row behind it
    result = pipeline.run("ghost-batch")
    assert not result.success

    reason = failure_reason_of(pipeline.instance, result.run_id)

    assert reason.startswith("LookupError: no micro-batch 'ghost-batch'"), reason
    assert "Dagster" not in reason and "\n" not in reason


class BatchBroken(Exception):
    """An exception class from a user module: Python prints it with its module path."""


def _raises_chained() -> None:
    raise RuntimeError("outer") from ValueError("inner")


def _raises_plain() -> None:
    raise ValueError("boom")


def _raises_while_handling() -> None:
    try:
        raise KeyError("card 7")
    except KeyError:
        raise RuntimeError("fallback failed too")  # an implicit context, on purpose


def _raises_user_class() -> None:
    raise BatchBroken("batch 12 has no cards\nsecond line of detail")


def _raises_failure() -> None:
    raise Failure(description="dispatch refused, no work done: streaming is off", metadata={"n": 1})


def _raises_long() -> None:
    raise ValueError("x" * 5000)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # The outermost user exception leads; an explicit ``from`` chain adds its root cause.
        (_raises_chained, "RuntimeError: outer (caused by ValueError: inner)"),
        (_raises_plain, "ValueError: boom"),
        # An exception raised while handling another (implicit context) is reported alone.
        (_raises_while_handling, "RuntimeError: fallback failed too"),
        # The module path Python prints is dropped; only the first line of the message is kept.
        (_raises_user_class, "BatchBroken: batch 12 has no cards"),
        # A Dagster ``Failure`` with a description gives the description.
        (_raises_failure, "dispatch refused, no work done: streaming is off"),
    ],
    ids=["chained", "plain", "implicit-context", "user-class", "failure-description"],
)
def test_the_cause_chain_rule(body: Callable[[], None], expected: str) -> None:
    with DagsterInstance.ephemeral() as instance:
        result = materialize([_failing_asset(body)], instance=instance, raise_on_error=False)
        assert not result.success
        assert failure_reason_of(instance, result.run_id) == expected


def test_a_reason_is_bounded() -> None:
    with DagsterInstance.ephemeral() as instance:
        result = materialize([_failing_asset(_raises_long)], instance=instance, raise_on_error=False)
        reason = failure_reason_of(instance, result.run_id)
    assert reason.startswith("ValueError: xxx") and len(reason) <= MAX_REASON_CHARS


def _failing_asset(body: Callable[[], None]) -> AssetsDefinition:
    @asset(name=f"fails_{body.__name__.strip('_')}")
    def failing() -> None:
        body()

    return failing


# A code location of its own for the dead-worker tests: one asset sleeps until killed, one exits mid-step.
KILLABLE_LOCATION = """
import os
import time

from dagster import Definitions, asset, define_asset_job, in_process_executor


@asset
def sleeps_until_killed() -> None:
    time.sleep(600)


@asset
def exits_mid_step() -> None:
    time.sleep(1)
    os._exit(3)


defs = Definitions(
    assets=[sleeps_until_killed, exits_mid_step],
    jobs=[
        define_asset_job("killable", selection=[sleeps_until_killed], executor_def=in_process_executor),
        define_asset_job("exits", selection=[exits_mid_step], executor_def=in_process_executor),
    ],
)
"""

# Runs launch at once (no queue, no daemon) through the default run launcher: the code server's worker.
KILLABLE_INSTANCE_YAML = """
telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""


def _wait_for(done: Callable[[], object], *, timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = done()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture
def code_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, dict[str, str], int]]:
    """A ``dagster api grpc`` code server for the killable location; yields (port, env, server pid)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(KILLABLE_INSTANCE_YAML)
    (tmp_path / "killable.py").write_text(KILLABLE_LOCATION)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
    env["DAGSTER_HOME"] = str(home)
    port = free_port()
    log = open(tmp_path / "code_server.log", "ab")
    server = start_group(
        [str(BIN / "dagster"), "api", "grpc", "-f", str(tmp_path / "killable.py"), "-a", "defs", "-p", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def healthy() -> bool:
            assert server.poll() is None, (tmp_path / "code_server.log").read_text()[-3000:]
            return code_server_answers(port)

        _wait_for(healthy, timeout_s=180, what="the code server to serve")
        yield port, env, server.pid
    finally:
        stop_group(server)
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    ("job", "kill_with", "detail"),
    [
        # The code server sees its worker process gone and quotes the exit status (an OOM kill is a SIGKILL).
        ("killable", signal.SIGKILL, "Run execution process for {run_id} was terminated by signal 9 (SIGKILL)."),
        ("exits", None, "Run execution process for {run_id} unexpectedly exited with code 3."),
        # A SIGTERM nobody asked Dagster for (an eviction, a stray kill): the worker fails the run itself.
        (
            "killable",
            signal.SIGTERM,
            'Execution of run for "killable" failed. Execution was interrupted unexpectedly.'
            " No user initiated termination request was found, treating as failure.",
        ),
    ],
    ids=["sigkill", "exit-code", "sigterm"],
)
def test_a_run_worker_that_dies_is_reported_as_a_dead_worker(
    code_server: tuple[int, dict[str, str], int], job: str, kill_with: signal.Signals | None, detail: str
) -> None:
    port, env, server_pid = code_server
    run_id = str(uuid.uuid4())
    launched = subprocess.run(
        [str(BIN / "dagster"), "job", "launch", "--grpc-port", str(port), "-j", job, "--run-id", run_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert launched.returncode == 0, launched.stdout + launched.stderr
    with DagsterInstance.get() as instance:
        if kill_with is not None:

            def step_pid() -> int | None:
                records = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_START).records
                event = records[0].event_log_entry.dagster_event if records else None
                return event.pid if event is not None else None

            pid = int(_wait_for(step_pid, timeout_s=180, what="the step to start in the run worker"))  # type: ignore[arg-type]
            worker = psutil.Process(pid)
            assert worker.ppid() == server_pid, "the step must run in the code server's run worker"
            worker.send_signal(kill_with)

        def failed() -> bool:
            run = instance.get_run_by_id(run_id)
            return run is not None and run.status == DagsterRunStatus.FAILURE

        _wait_for(failed, timeout_s=180, what="Dagster to mark the dead worker's run failed")
        reason = failure_reason_of(instance, run_id)

    assert reason == f"{WORKER_DIED}: {detail.format(run_id=run_id)}"
