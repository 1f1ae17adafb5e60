"""A sweep run whose worker cannot import the code is redone inside its backfill (issue 40 item 1, the
``dg dev`` reload case).

A code location served from a file (``dg dev``'s ``python_file`` location, or any code server on ``-f``)
launches each run as a new process that imports that file again. While the file on disk does not import
(an edit half saved, a reload of broken code under ``dg dev``), a run the queue launches fails before any
step ("Could not load job definition"), and Dagster counts the partition failed. Its batch was never taken,
so the sensors request it again; requested as a run of the same backfill, the partition's materialization
is the backfill's own and the backfill ends COMPLETED_SUCCESS; requested outside it, the cards are read
but the backfill ends COMPLETED_FAILED.

Here the code server keeps serving the definitions it loaded while the file is broken (no reload), so
every run launched meanwhile fails at load, without depending on when a reload lands.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterRunStatus, RunsFilter

from stage_e_dagster.code_server import HOST, LOCATION, code_server_answers, free_port, grpc_workspace
from stage_e_dagster.defs.abandoned import BACKFILL_FINISHED
from stage_e_dagster.defs.dagster_internals import backfill_status
from stage_e_dagster.process_groups import kill_what_is_left, start_group, stop_group

from .test_daemon import BIN, assert_no_duplicates, sqlite_stack_for

pytestmark = pytest.mark.slow

LOCATION_FILE = "from stage_e_dagster.definitions import defs  # noqa: F401\n"
BROKEN_LOCATION_FILE = 'raise RuntimeError("the code on disk does not import")\n'
# The engine event Dagster's run worker writes when it cannot load the job (dagster/_grpc/impl.py).
COULD_NOT_LOAD = "Could not load job definition"


def test_a_sweep_run_that_cannot_import_its_code_is_redone_inside_its_backfill(
    corpus_template: Path, tmp_path: Path
) -> None:
    # Ten cards in four batches (3, 3, 3, 1), one run at a time: the file breaks with runs still queued.
    stack = sqlite_stack_for(corpus_template, tmp_path, batch_size=3, cap=1)
    location = tmp_path / "location.py"
    location.write_text(LOCATION_FILE)
    port = free_port()
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(grpc_workspace(port))
    server_log = tmp_path / "code-server.log"
    server: subprocess.Popen[bytes] | None = None
    try:
        cards = stack.counts()["cards"]
        launched = stack.stage_e("sweep")
        assert launched.returncode == 0 and "launched backfill" in launched.stdout, launched.stdout + launched.stderr
        instance = stack.instance()
        [backfill] = instance.get_backfills()
        backfill_id = backfill.backfill_id
        with open(server_log, "ab") as log:
            server = start_group(
                [str(BIN / "dagster"), "api", "grpc", "-h", HOST, "-p", str(port), "-f", str(location),
                 "-d", str(tmp_path), "--location-name", LOCATION],
                env=stack.env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while not code_server_answers(port):
            assert server.poll() is None and time.monotonic() < deadline, server_log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        stack.start(workspace)

        def count(*statuses: DagsterRunStatus) -> int:
            return instance.get_runs_count(RunsFilter(tags={"dagster/backfill": backfill_id}, statuses=list(statuses)))

        stack.wait_until(lambda: count(DagsterRunStatus.SUCCESS) >= 1 and count(DagsterRunStatus.QUEUED) >= 1,
                         timeout_s=300, what="a finished sweep run with more queued behind it")
        location.write_text(BROKEN_LOCATION_FILE)
        stack.wait_until(lambda: count(DagsterRunStatus.FAILURE) >= 1, timeout_s=300,
                         what="a sweep run launched while the file is broken to fail")
        location.write_text(LOCATION_FILE)
        stack.wait_until(lambda: stack.idle() and backfill_status(instance, backfill_id) in BACKFILL_FINISHED,
                         timeout_s=400, what="every card processed and the backfill finished")

        runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
        by_status = {s.value: sum(r.status == s for r in runs) for s in DagsterRunStatus}
        status = backfill_status(instance, backfill_id)
        print(f"\nbackfill {status}; runs {({s: n for s, n in by_status.items() if n})}")
        failed = [r for r in runs if r.status == DagsterRunStatus.FAILURE]
        for run in failed:  # only the fault's own: runs that never got past loading the code
            messages = [r.event_log_entry.message or "" for r in
                        instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ENGINE_EVENT).records]
            assert any(COULD_NOT_LOAD in m for m in messages), (run.run_id, messages)
            assert any(r.status == DagsterRunStatus.SUCCESS and r.tags.get("dagster/partition") ==
                       run.tags.get("dagster/partition") for r in runs), f"{run.run_id}'s partition never succeeded"
        assert failed, "no run met the broken file"
        assert by_status["CANCELED"] == 0, by_status
        assert status == "COMPLETED_SUCCESS", stack.log.read_text()[-4000:]
        after = stack.counts()
        assert after["evidence_cards"] == cards and after["evidence"] == cards, after
        assert_no_duplicates(stack.engine)
    finally:
        stack.stop()
        if server is not None:
            if server.poll() is None:
                stop_group(server)
            kill_what_is_left(server.pid, 30.0, after_kill_s=30.0)
        stack.engine.dispose()
