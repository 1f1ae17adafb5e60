#!/usr/bin/env python3
"""A sweep through code-server faults, at the size issue 40 asks (100 cards and more).

The production topology on one machine: the code location's own gRPC server (``dagster api grpc``,
as the Helm chart runs it) and ``dagster-daemon run`` loading it through a ``grpc_server`` workspace,
on the shipped ``dagster.yaml`` and the environment every daemon of the project gets
(``dagster_internals.daemon_environment``). A ``stage-e sweep`` backfill runs over a seeded SQLite
catalogue while the code server suffers, in turn, each fault of ``--faults``:

  * ``kill``: SIGKILLed (the server process alone, as the OOM killer takes it) and started again
    ``--down-s`` seconds later;
  * ``failed-load``: replaced by a server whose location fails to load (``--lazy-load-user-code`` on a
    module that does not exist; what a reload with broken code shows), kept until a backfill pass has
    met it (the daemon refreshes its workspace every 60 s), then the real server again.

  * ``own-kill`` (its own topology: ``dagster-daemon run`` on the project's ``workspace.yaml``, which
    starts its own code server): that code server SIGKILLed; the daemon replaces it at its next
    workspace refresh (every 60 s), as the issue saw.
  * ``dg-dev-reload`` (its own topology: ``dg dev`` on a workspace whose ``python_file`` location
    imports the definitions): the location's file is broken and the location reloaded as the UI's
    Reload button does (GraphQL ``reloadRepositoryLocation``), kept broken until a backfill pass has
    met it, then mended and reloaded again. The backfill stays REQUESTED and its pass is skipped; a run
    the queue launches while the file is broken starts a worker that imports that file and fails before
    any step ("Could not load job definition"), and a launch that reaches the location just as its load
    failed is refused; the sensors request such a run's batch again as a run of the same backfill, whose
    materialization clears the failed partition (docs/operations.md).

Each fault starts once a sweep run has finished with others queued. Prints what each fault did and,
at the end, the backfill's status, the runs by status and the evidence per card; exits 1 unless the
backfill ended COMPLETED_SUCCESS with every card's evidence written once, no run cancelled, and no run
failed other than one that failed before any step (a worker that could not load the code, a launch the
location refused) and whose partition a later run of the backfill materialized.

    .venv/bin/python scripts/code_server_drill.py                       # 100 cards, kill then failed-load
    .venv/bin/python scripts/code_server_drill.py --cards 200 --faults kill --down-s 90
    .venv/bin/python scripts/code_server_drill.py --faults own-kill        # the daemon's own code server
    .venv/bin/python scripts/code_server_drill.py --faults dg-dev-reload   # through dg dev instead
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

import psutil
import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card, ImageEvidence, MicroBatch
from stage_e_dagster.cli.demo import dagster_command, stop_process_group
from stage_e_dagster.code_server import HOST, LOCATION, MODULE, code_server_answers, free_port, grpc_workspace
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.defs.dagster_internals import (
    DG_CLI_MODULE,
    backfill_status,
    daemon_environment,
    run_events,
    runs,
    runs_count,
)
from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML, PROJECT_ROOT, WORKSPACE_YAML, create_instance_storage
from stage_e_dagster.defs.run_ends import runs_in_progress
from stage_e_dagster.process_groups import kill_what_is_left, start_group, stop_group

BIN = Path(sys.executable).parent
FINISHED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
REQUEUED = "Run dequeue failed to reach the user code server, re-submitting the run into the queue"
COULD_NOT_LOAD = "Could not load job definition"  # a run worker that could not import the code (dagster/_grpc/impl.py)
# The run queue's words for a launch that failed otherwise than by not reaching the location (for one, a code
# server whose location failed to load before the daemon's watch saw it answers StartRun with an error).
LAUNCH_FAILED = "Caught an unrecoverable error while dequeuing the run"
PASS_SKIPPED = "will resume once it is available again"
BROKEN_MODULE = "stage_e_dagster.no_such_module"
LOCATION_FILE = "from stage_e_dagster.definitions import defs  # noqa: F401\n"
BROKEN_LOCATION_FILE = 'raise RuntimeError("a reload with broken code")\n'
RELOAD = """mutation Reload($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) {
  __typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename ... on PythonError { message } } } } }"""


class Drill:
    def __init__(self, folder: Path, cards: int, batch: int, cap: int, *, topology: str = "grpc") -> None:
        self.folder = folder
        self.topology = topology  # grpc (a code server of its own), own (the daemon's), dg-dev
        dg_dev = topology == "dg-dev"
        self.url = f"sqlite:///{folder / 'catalog.sqlite'}"
        self.engine = make_engine(self.url)
        upgrade(self.engine)
        started = time.monotonic()
        seed_corpus(self.engine, folder / "corpus", cards=cards, seed=40)
        print(f"seeded {cards} cards in {time.monotonic() - started:.0f} s", flush=True)
        home = folder / "dagster_home"
        home.mkdir()
        shutil.copyfile(EMBEDDED_INSTANCE_YAML, home / "dagster.yaml")
        create_instance_storage(home)
        self.env = daemon_environment(
            {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
            | {"DAGSTER_HOME": str(home), "STAGE_E_STATE_DIR": str(folder / "state"),
               "STAGE_E_STREAMING_ENABLED": "true", "STAGE_E_DATABASE_URL": self.url,
               "STAGE_E_IMAGE_ROOTS": str(folder / "corpus"), "STAGE_E_HOST_LOAD_CEILING": "1000",
               "STAGE_E_CPU_PRESSURE_CEILING": "100", "STAGE_E_RSS_MB_CEILING": "100000",
               "STAGE_E_FETCH_FAILURE_RATE_CEILING": "1", "STAGE_E_MICRO_BATCH_SIZE": str(batch),
               "STAGE_E_MAX_CONCURRENT_DISPATCHES": str(cap), "STAGE_E_OCR_PASS": "cheap"})
        os.environ["DAGSTER_HOME"] = str(home)
        self.instance = DagsterInstance.get()
        self.port = free_port()
        self.workspace = folder / "workspace.yaml"
        if dg_dev:  # dg dev serves the location from a file of its own, which a fault breaks and mends
            (folder / "location.py").write_text(LOCATION_FILE)
            self.workspace.write_text("load_from:\n  - python_file:\n      relative_path: location.py\n"
                                      f"      location_name: {LOCATION}\n      working_directory: {folder}\n")
        elif topology == "own":  # the project's python_module workspace: the daemon starts the code server
            self.workspace = WORKSPACE_YAML
        else:
            self.workspace.write_text(grpc_workspace(self.port))
        self.daemon_log, self.server_log = folder / "daemon.log", folder / "code-server.log"
        self.daemon: subprocess.Popen[bytes] | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.groups: list[int] = []
        self.backfill_id = ""

    def start_server(self, module: str = MODULE) -> None:
        lazy = [] if module == MODULE else ["--lazy-load-user-code"]
        with open(self.server_log, "ab") as log:
            self.server = start_group(
                [str(BIN / "dagster"), "api", "grpc", "-h", HOST, "-p", str(self.port), "-m", module,
                 "--location-name", LOCATION, *lazy],
                env=self.env, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.groups.append(self.server.pid)
        self.wait(lambda: code_server_answers(self.port), 180, "the code server to answer")

    def own_code_servers(self) -> list[psutil.Process]:
        """The code servers the daemon started itself and still running (``dagster api grpc`` children)."""
        assert self.daemon is not None
        found = []
        for child in psutil.Process(self.daemon.pid).children(recursive=True):
            try:
                if "api grpc" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
            except psutil.Error:
                continue
        return found

    def ui_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.port}/server_info", timeout=5) as reply:
                return reply.status == 200
        except OSError:
            return False

    def reload(self) -> str:
        """What the UI's Reload button does for the location; returns the load error's message, or ''."""
        body = json.dumps({"query": RELOAD, "variables": {"name": LOCATION}}).encode()
        request = urllib.request.Request(f"http://{HOST}:{self.port}/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            entry = json.load(reply)["data"]["reloadRepositoryLocation"]
        loaded = entry.get("locationOrLoadError") or {}
        return loaded.get("message", "") if loaded.get("__typename") == "PythonError" else ""

    def kill_server(self) -> None:
        assert self.server is not None
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.wait()

    def start_daemon(self) -> None:
        """``dagster-daemon run`` on the grpc workspace; or ``dg dev`` (webserver, daemon and code server)."""
        if self.topology == "dg-dev":
            command = dagster_command(DG_CLI_MODULE, "dev", "-w", str(self.workspace), "-h", HOST,
                                      "-p", str(self.port))
            with open(self.daemon_log, "ab") as log:
                self.daemon = start_group(command, env=self.env, cwd=self.folder, stdout=log,
                                          stderr=subprocess.STDOUT)
            self.wait(self.ui_answers, 240, "dg dev's UI to answer")
            return
        with open(self.daemon_log, "ab") as log:
            self.daemon = start_group([str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)],
                                      env=self.env, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)

    def sweep(self) -> None:
        done = subprocess.run([str(BIN / "stage-e"), "sweep"], env=self.env, capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0 or "launched backfill" not in done.stdout:
            raise SystemExit(f"stage-e sweep failed: {done.stdout}{done.stderr}")
        with self.engine.connect() as conn:  # the sweep records its backfill's id on every batch it launches
            [self.backfill_id] = conn.execute(sa.select(MicroBatch.backfill_id).distinct()).scalars().all()
        print(done.stdout.strip(), flush=True)

    def runs(self, *statuses: DagsterRunStatus) -> int:
        return runs_count(self.instance, RunsFilter(tags={"dagster/backfill": self.backfill_id},
                                                    statuses=list(statuses)))

    def requeued(self) -> int:
        """The sweep's runs the queue put back after failing to reach their location."""
        return sum(
            any(REQUEUED in e.message for e in run_events(self.instance, run.run_id, DagsterEventType.ENGINE_EVENT))
            for run in runs(self.instance, RunsFilter(tags={"dagster/backfill": self.backfill_id})))

    def launched(self) -> set[str]:
        """The sweep's runs that a launch has reached (started, or already ended)."""
        return {r.run_id for r in runs(self.instance, RunsFilter(tags={"dagster/backfill": self.backfill_id}))
                if r.status not in (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED)}

    def status(self) -> str:
        return backfill_status(self.instance, self.backfill_id) or "?"

    def wait(self, done: Callable[[], bool], timeout_s: float, what: str, *, keep_requested: bool = False) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if self.daemon is not None and self.daemon.poll() is not None:
                raise SystemExit(f"the daemon exited with {self.daemon.returncode} waiting for {what}")
            if keep_requested and self.status() != "REQUESTED":
                raise SystemExit(f"the backfill went {self.status()} waiting for {what}; see {self.daemon_log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(1)

    def a_run_done_with_more_queued(self) -> None:
        before = self.runs(DagsterRunStatus.SUCCESS)
        self.wait(lambda: self.runs(DagsterRunStatus.SUCCESS) > before and self.runs(DagsterRunStatus.QUEUED) >= 3,
                  600, "a sweep run to finish with others queued", keep_requested=True)

    def fault(self, name: str, down_s: float) -> None:
        self.a_run_done_with_more_queued()
        requeued, skipped = self.requeued(), self.daemon_log.read_text().count(PASS_SKIPPED)
        started = time.monotonic()
        if name == "own-kill":
            [server] = self.own_code_servers()
            server.kill()
            self.wait(lambda: bool(self.own_code_servers()), 300, "the daemon to start a code server again",
                      keep_requested=True)
            self.report(name, started, requeued, skipped)
            return
        if name == "dg-dev-reload":
            (self.folder / "location.py").write_text(BROKEN_LOCATION_FILE)
            if not self.reload():
                raise SystemExit("the reload of the broken location loaded it")
            self.wait(lambda: self.daemon_log.read_text().count(PASS_SKIPPED) > skipped, 300,
                      "a backfill pass to meet the location failing to load", keep_requested=True)
            (self.folder / "location.py").write_text(LOCATION_FILE)
            if self.reload():
                raise SystemExit("the mended location did not load")
            self.report(name, started, requeued, skipped)
            return
        self.kill_server()
        if name == "kill":
            self.wait(lambda: time.monotonic() - started >= down_s, down_s + 5, "the outage", keep_requested=True)
        else:
            self.start_server(BROKEN_MODULE)
            self.wait(lambda: self.daemon_log.read_text().count(PASS_SKIPPED) > skipped, 300,
                      "a backfill pass to meet the location failing to load", keep_requested=True)
            self.kill_server()
        self.start_server()
        self.report(name, started, requeued, skipped)

    def report(self, name: str, started: float, requeued: int, skipped: int) -> None:
        """Once a run of the sweep is launched after the location came back, what the fault did."""
        back = time.monotonic()
        launched = self.launched()
        self.wait(lambda: self.launched() - launched, 400, "a sweep run launched after the location came back",
                  keep_requested=True)
        print(f"fault {name}: location unavailable {back - started:.0f} s; sweep runs going again "
              f"{time.monotonic() - back:.0f} s after it was back; runs requeued by the queue "
              f"{self.requeued() - requeued}; backfill passes skipped "
              f"{self.daemon_log.read_text().count(PASS_SKIPPED) - skipped}; backfill {self.status()}", flush=True)

    def finish(self) -> bool:
        def idle() -> bool:
            with self.engine.connect() as conn:
                waiting = conn.execute(sa.select(sa.func.count()).select_from(Card).where(
                    sa.or_(Card.stage_c_pending, Card.stage_d_pending))).scalar_one()
                in_flight = conn.execute(sa.select(sa.func.count()).select_from(MicroBatch).where(
                    MicroBatch.status.in_(("pending", "running")))).scalar_one()
            return not waiting and not in_flight and runs_in_progress(self.instance) == 0 and self.status() in FINISHED

        self.wait(idle, 900, "every card processed and the backfill finished")
        with self.engine.connect() as conn:
            cards = conn.execute(sa.select(sa.func.count()).select_from(Card)).scalar_one()
            per_card = conn.execute(sa.select(ImageEvidence.card_id, sa.func.count()).group_by(ImageEvidence.card_id)
                                    ).all()
        once = sum(1 for _, n in per_card if n == 1)
        by_status = {s.value: self.runs(s) for s in DagsterRunStatus if self.runs(s)}
        redone, other_failures = self.failed_runs()
        print(f"backfill {self.backfill_id}: {self.status()}; runs {by_status}; "
              f"{cards} cards, {once} with evidence once, {len(per_card) - once} more than once, "
              f"{cards - len(per_card)} without; failed before any step and redone in the backfill: "
              f"{sum(redone.values())} {redone or ''}; other failed runs: {other_failures}", flush=True)
        return (self.status() == "COMPLETED_SUCCESS" and once == cards == len(per_card)
                and not self.runs(DagsterRunStatus.CANCELED) and not other_failures)

    def failed_runs(self) -> tuple[dict[str, int], int]:
        """The backfill's failed runs: those that failed before any step (their batch never taken) and whose
        partition a later run of the backfill materialized, by how they failed; and the number of others."""
        every = runs(self.instance, RunsFilter(tags={"dagster/backfill": self.backfill_id}))
        succeeded = {r.tags.get("dagster/partition") for r in every if r.status == DagsterRunStatus.SUCCESS}
        redone: dict[str, int] = {}
        other = 0
        for run in every:
            if run.status != DagsterRunStatus.FAILURE:
                continue
            stepped = run_events(self.instance, run.run_id, DagsterEventType.STEP_START, limit=1)
            if stepped or run.tags.get("dagster/partition") not in succeeded:
                other += 1
                continue
            engine = run_events(self.instance, run.run_id, DagsterEventType.ENGINE_EVENT)
            how = ("worker could not load the code" if any(COULD_NOT_LOAD in e.message for e in engine)
                   else "launch failed" if any(LAUNCH_FAILED in e.message for e in engine) else "other")
            redone[how] = redone.get(how, 0) + 1
        return redone, other

    def stop(self) -> None:
        if self.daemon is not None:
            (stop_process_group if self.topology == "dg-dev" else stop_group)(self.daemon)
        if self.server is not None and self.server.poll() is None:
            stop_group(self.server)
        for pgid in self.groups:
            kill_what_is_left(pgid, 30.0, after_kill_s=30.0)
        self.instance.dispose()
        self.engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=100)
    parser.add_argument("--batch", type=int, default=5, help="STAGE_E_MICRO_BATCH_SIZE: cards per sweep partition")
    parser.add_argument("--cap", type=int, default=2, help="STAGE_E_MAX_CONCURRENT_DISPATCHES")
    parser.add_argument("--faults", default="kill,failed-load",
                        help="comma-separated: kill, failed-load; or own-kill or dg-dev-reload alone")
    parser.add_argument("--down-s", type=float, default=75.0, help="how long a killed code server stays down")
    parser.add_argument("--keep", type=Path, help="keep the state folder here (logs, catalogue, instance)")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    topology = "dg-dev" if "dg-dev-reload" in faults else "own" if "own-kill" in faults else "grpc"
    if not set(faults) <= {"kill", "failed-load", "own-kill", "dg-dev-reload"} or (
            topology != "grpc" and len(set(faults)) > 1):
        parser.error("--faults takes kill and failed-load, or own-kill or dg-dev-reload alone (each its own topology)")
    folder = Path(tempfile.mkdtemp(prefix="stage-e-drill-")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    drill = Drill(folder, args.cards, args.batch, args.cap, topology=topology)
    started = time.monotonic()
    try:
        drill.sweep()
        if topology == "grpc":
            drill.start_server()
        drill.start_daemon()
        for fault in faults:
            drill.fault(fault, args.down_s)
        ok = drill.finish()
    finally:
        drill.stop()
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"drill {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
