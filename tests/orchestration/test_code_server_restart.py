"""A sweep outlives its code server (issue 40 item 1): the code location's own gRPC server, as the Helm
chart runs it, is SIGKILLed mid-sweep, comes back first serving a location that fails to load (a reload
that failed, as ``dg dev`` shows one) and then whole. The daemon on the shipped ``dagster.yaml``, with the
environment every daemon of the project gets (``dagster_internals.daemon_environment``), must keep the
backfill REQUESTED through the outage and end it COMPLETED_SUCCESS with no run cancelled or failed.

Slow by nature: the outage lasts longer than the run queue's earlier retries (6, 10 s apart) and until a
backfill pass (about every 30 s) has met the location failing to load. ``scripts/code_server_drill.py``
is the same drill at 100 cards and more.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from stage_e_dagster.code_server import HOST, LOCATION, MODULE, code_server_answers, free_port, grpc_workspace
from stage_e_dagster.defs.abandoned import BACKFILL_FINISHED
from stage_e_dagster.defs.dagster_internals import backfill_status
from stage_e_dagster.defs.instance import PROJECT_ROOT
from stage_e_dagster.process_groups import kill_what_is_left, start_group, stop_group

from .test_daemon import BIN, Stack, assert_no_duplicates, sqlite_stack_for

pytestmark = pytest.mark.slow

# What the run queue writes when a dequeue could not reach the location and the run goes back in the queue.
REQUEUED = "Run dequeue failed to reach the user code server, re-submitting the run into the queue"
# What the backfill daemon logs when a pass skips because the location is unreachable or failing to load.
PASS_SKIPPED = "will resume once it is available again"
# A code server down for longer than the run queue's old retries (6, 10 s apart) lasted.
OUTAGE_AT_LEAST_S = 75.0


class CodeServers:
    """``dagster api grpc`` on one port, started again and again; every process group it started is
    stopped at the end (a SIGKILLed server's run workers live on in its group)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log, self.port = env, log, free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.groups: list[int] = []

    def start(self, module: str = MODULE) -> None:
        lazy = [] if module == MODULE else ["--lazy-load-user-code"]  # a failing import then fails the load, not the server
        command = [str(BIN / "dagster"), "api", "grpc", "-h", HOST, "-p", str(self.port), "-m", module,
                   "--location-name", LOCATION, *lazy]
        with open(self.log, "ab") as log:
            self.process = start_group(command, env=self.env, cwd=PROJECT_ROOT, stdout=log,
                                       stderr=subprocess.STDOUT)
        self.groups.append(self.process.pid)
        deadline = time.monotonic() + 180
        while not code_server_answers(self.port):
            assert self.process.poll() is None and time.monotonic() < deadline, (
                f"code server did not answer; log tail:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def sigkill(self) -> None:
        """The server process alone, as the OOM killer takes it; run workers it started go on."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_group(self.process)
        for pgid in self.groups:
            kill_what_is_left(pgid, 30.0, after_kill_s=30.0)


def requeued_runs(instance: DagsterInstance, backfill_id: str) -> int:
    """Runs of the backfill the queue put back after failing to reach their location."""
    runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
    return sum(
        any(REQUEUED in (r.event_log_entry.message or "")
            for r in instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ENGINE_EVENT).records)
        for run in runs
    )


def sweep_through_a_code_server_outage(stack: Stack, servers: CodeServers, workspace: Path) -> dict[str, object]:
    """Launch a sweep, kill its code server once a run has finished with more queued, bring it back
    failing to load until a backfill pass and a dequeue have met the outage, then whole; wait for the
    end. Returns what was seen on the way, for the caller's assertions."""
    launched = stack.stage_e("sweep")
    assert launched.returncode == 0 and "launched backfill" in launched.stdout, launched.stdout + launched.stderr
    instance = stack.instance()
    [backfill] = instance.get_backfills()
    backfill_id = backfill.backfill_id
    servers.start()
    stack.start(workspace)

    def count(*statuses: DagsterRunStatus) -> int:
        return instance.get_runs_count(RunsFilter(tags={"dagster/backfill": backfill_id}, statuses=list(statuses)))

    def still_requested() -> None:
        status = backfill_status(instance, backfill_id)
        assert status == "REQUESTED", (
            f"the backfill went {status} during the outage; daemon log tail:\n{stack.log.read_text()[-4000:]}")

    stack.wait_until(lambda: count(DagsterRunStatus.SUCCESS) >= 1 and count(DagsterRunStatus.QUEUED) >= 2,
                     timeout_s=240, what="a finished sweep run with more queued behind it")
    servers.sigkill()
    killed_at = time.monotonic()
    servers.start("stage_e_dagster.no_such_module")  # back, but its location fails to load

    def outage_met() -> bool:
        return (time.monotonic() - killed_at >= OUTAGE_AT_LEAST_S and PASS_SKIPPED in stack.log.read_text()
                and requeued_runs(instance, backfill_id) >= 1)

    stack.wait_until(outage_met, timeout_s=300, on_poll=still_requested,
                     what="a backfill pass and a dequeue to meet the unloadable location")
    outage_s = time.monotonic() - killed_at
    servers.sigkill()
    servers.start()
    stack.wait_until(lambda: stack.idle() and backfill_status(instance, backfill_id) in BACKFILL_FINISHED,
                     timeout_s=400, what="every card processed and the backfill finished after the outage")
    runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
    return {
        "instance": instance,
        "backfill_id": backfill_id,
        "status": backfill_status(instance, backfill_id),
        "outage_s": outage_s,
        "requeued": requeued_runs(instance, backfill_id),
        "runs": {status: sum(r.status == status for r in runs) for status in DagsterRunStatus},
    }


def test_a_sweep_outlives_its_code_server_killed_and_back_failing_to_load(
    corpus_template: Path, tmp_path: Path
) -> None:
    # Ten cards in four batches (3, 3, 3, 1), one run at a time: when the first run has finished, three
    # are queued, so the kill lands between runs with more to come and the outage meets a dequeue.
    stack = sqlite_stack_for(corpus_template, tmp_path, batch_size=3, cap=1)
    servers = CodeServers(stack.env, tmp_path / "code-server.log")
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(grpc_workspace(servers.port))
    try:
        cards = stack.counts()["cards"]
        seen = sweep_through_a_code_server_outage(stack, servers, workspace)
        runs = seen["runs"]
        print(f"\noutage {seen['outage_s']:.0f} s, {seen['requeued']} run(s) requeued by the run queue; "
              f"backfill {seen['status']}; runs {({s.value: n for s, n in runs.items() if n})}")
        assert seen["status"] == "COMPLETED_SUCCESS"
        assert runs[DagsterRunStatus.CANCELED] == 0 and runs[DagsterRunStatus.FAILURE] == 0, runs
        after = stack.counts()
        assert after["evidence_cards"] == cards and after["evidence"] == cards, after
        assert_no_duplicates(stack.engine)
    finally:
        stack.stop()
        servers.stop()
        stack.engine.dispose()
