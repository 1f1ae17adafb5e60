"""Start and stop the services many times in a row, as a user does, and check that every stop is clean.

Each cycle starts, on one state folder, the UI demo (``stage-e demo``: ``dg dev`` with the webserver,
the daemon and the code server) or the headless daemon (``stage-e demo --headless``), the two in
turn; waits until the daemon has evaluated a sensor through the code server (and, for the UI, until
the webserver answers); on every third cycle it inserts cards first and also waits until a dispatch
run is going. Then it stops the demo as a user does: SIGINT (Ctrl-C), or SIGTERM every other time
for each kind. After each stop it checks:

  * ``stage-e demo`` exited 0, and no process of the cycle this script inherited as an orphan (it is
    their subreaper: a run worker whose code server stopped first) ended by a signal;
  * the cycle's logs (the demo's output, which ``dg dev`` and its children share, and the headless
    daemon's log) hold none of ``service_logs.BAD_LOG_LINES``: a traceback, gRPC's "epoll_wait error"
    before an abort, a fatal error, ``dg dev`` reporting a service that died or had to be killed;
  * no process of the cycle is left: none still carries the cycle's mark in its environment (every
    process the demo starts inherits it, whatever group it is in).

Each problem is named by its kind: ``[abort]`` (a process ended by a signal, gRPC's epoll error, a fatal
error), ``[left]``, ``[exit]``, ``[log]`` (any other bad line), ``[timeout]``, and ``[dagster-race]``:
Dagster 1.13.27's daemon closes its workspace before it shuts its daemons' thread pools down
(``dagster/_daemon/controller.py``), so work still in a pool at the stop asks for the code location
afterwards and logs ``DagsterCodeLocationNotFoundError`` with a traceback. The sensors used to tick in
such a pool; they tick in the daemon's own thread now (``sensors: use_threads: false``), which the daemon
joins before it closes the workspace. The run queue's dequeue pool can still hit it, so it stays named
apart (``stage_e_dagster/service_logs.py``): neither hidden nor confused with an abort, and still a failure.

The first cycle seeds the demo's corpus (``--cards``). One line per cycle, then a summary; exit 1 if
any cycle had a problem of any kind. Issue 40 item 6: a daemon that aborted with SIGABRT when started.

Usage:
  python scripts/service_cycles.py                      # 50 cycles (~30 min on 2 cores)
  python scripts/service_cycles.py --cycles 4 --keep /tmp/cycles
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
import sqlalchemy as sa
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from stage_e_dagster.catalog.models import Card
from stage_e_dagster.code_server import free_port
from stage_e_dagster.defs.dagster_internals import runs_count
from stage_e_dagster.process_groups import start_group
from stage_e_dagster.service_logs import bad_lines

BIN = Path(sys.executable).parent
MARK = "SERVICE_CYCLES_MARK"
# What the daemon logs each time it evaluates a sensor through the code server: the services are up.
SENSOR_EVALUATED = "Checking for new runs for sensor"
# Bars no load can cross: the cycles start and stop the services, and on a shared machine other jobs' load
# would open a host-load trip, which halts dispatch for good (only a person acknowledges it) and leaves
# no run going to stop with. The benchmarks do the same (bench/_support.py, streaming_environment).
BARS_OUT_OF_REACH = {"STAGE_E_HOST_LOAD_CEILING": "1000", "STAGE_E_CPU_PRESSURE_CEILING": "100",
                     "STAGE_E_RSS_MB_CEILING": "100000"}
CARD_COLUMNS = (Card.identifier, Card.name, Card.image_locator, Card.card_type, Card.dpi, Card.declared_content_hash)
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.5
UP_TIMEOUT_S = 300.0
# The demo gives dg dev 60 s to stop, a run worker 30 s more to finish its batch, then SIGTERM, SIGKILL.
STOP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Plan:
    number: int
    kind: str  # "ui" or "headless"
    in_flight: bool
    stop_signal: signal.Signals

    @classmethod
    def of(cls, number: int) -> "Plan":
        kind = "ui" if number % 2 else "headless"
        # SIGINT, SIGINT, SIGTERM, SIGTERM, ...: each kind is stopped both ways.
        stop = signal.SIGINT if (number - 1) // 2 % 2 == 0 else signal.SIGTERM
        return cls(number, kind, number % 3 == 0, stop)


@dataclass
class Outcome:
    plan: Plan
    exit_code: int | None = None
    up_s: float = 0.0
    stop_s: float = 0.0
    runs_going: int = 0
    problems: list[str] = field(default_factory=list)


class Orphans:
    """This process as the subreaper of everything the demos start: a descendant whose parent exits first
    becomes its child, and its exit status is read here instead of being lost."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        self.commands: dict[int, str] = {}
        self.ended_by_signal: list[str] = []

    def remember(self, root: psutil.Process) -> None:
        """Note the command of every descendant of ``root`` (to name an orphan that ends by a signal)."""
        try:
            for process in root.children(recursive=True):
                if process.pid not in self.commands:
                    self.commands[process.pid] = " ".join(process.cmdline())[:160]
        except psutil.Error:
            pass

    def reap(self, leader: int) -> None:
        """Collect every child of this process but ``leader`` that has ended."""
        for child in psutil.Process().children():
            if child.pid == leader:
                continue
            try:
                pid, status = os.waitpid(child.pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if pid and os.WIFSIGNALED(status):
                name = signal.Signals(os.WTERMSIG(status)).name
                self.ended_by_signal.append(f"[abort] pid {pid} ended by {name}: {self.commands.get(pid, '?')}")


def marked(mark: str) -> list[str]:
    """Live processes whose environment carries ``MARK=mark``."""
    found = []
    for process in psutil.process_iter(["pid", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if process.environ().get(MARK) == mark:
                found.append(f"pid {process.pid}: {' '.join(process.cmdline())[:160]}")
        except psutil.Error:
            continue
    return found


def ui_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def add_cards(url: str, count: int, tag: str) -> None:
    """Insert ``count`` copies of seeded cards (new identifiers, the same images): a backlog to dispatch."""
    engine = sa.create_engine(url, connect_args={"timeout": 60})
    with engine.begin() as conn:
        rows = conn.execute(sa.select(*CARD_COLUMNS).where(~Card.identifier.contains("~"))
                            .order_by(Card.id).limit(count)).mappings().all()
        conn.execute(sa.insert(Card), [dict(row) | {"identifier": f"{row['identifier']}~{tag}"} for row in rows])
    engine.dispose()


class Cycles:
    def __init__(self, folder: Path, cards: int) -> None:
        self.folder = folder
        self.state = folder / "state"
        self.cards = cards
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
        self.env |= BARS_OUT_OF_REACH | {"STAGE_E_STATE_DIR": str(self.state)}
        self.catalog_url = f"sqlite:///{self.state / 'catalog.sqlite'}"
        self.daemon_log = self.state / "demo-daemon.log"
        self.orphans = Orphans()

    def log_text(self, path: Path, offset: int = 0) -> str:
        if not path.exists():
            return ""
        with open(path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def wait(self, done: Callable[[], bool], proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            self.orphans.remember(psutil.Process(proc.pid))
            self.orphans.reap(proc.pid)
            if proc.poll() is not None:
                raise RuntimeError(f"the demo exited with code {proc.returncode} before {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def runs_going(self) -> int:
        instance = DagsterInstance.from_config(str(self.state / "dagster_home"))
        try:
            return runs_count(instance, RunsFilter(statuses=[DagsterRunStatus.STARTED]))
        finally:
            instance.dispose()

    def run(self, plan: Plan) -> Outcome:
        outcome = Outcome(plan)
        mark = f"{os.getpid()}-{plan.number}"
        log = self.folder / f"cycle-{plan.number:03d}.log"
        daemon_offset = self.daemon_log.stat().st_size if self.daemon_log.exists() else 0
        if plan.in_flight and (self.state / "catalog.sqlite").exists():
            add_cards(self.catalog_url, 4, str(plan.number))
        port = free_port()
        command = [str(BIN / "stage-e"), "demo", "--cards", str(self.cards)]
        command += ["--headless"] if plan.kind == "headless" else ["--port", str(port)]
        started = time.monotonic()
        with open(log, "wb") as out:
            proc = start_group(command, env=self.env | {MARK: mark}, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
        daemon_log = log if plan.kind == "ui" else self.daemon_log
        daemon_from = 0 if plan.kind == "ui" else daemon_offset
        try:
            self.wait(lambda: SENSOR_EVALUATED in self.log_text(daemon_log, daemon_from), proc, UP_TIMEOUT_S,
                      "sensor evaluated by the daemon")
            if plan.kind == "ui":
                self.wait(lambda: ui_answers(port), proc, UP_TIMEOUT_S, "UI answering")
            if plan.in_flight:
                self.wait(lambda: self.runs_going() > 0, proc, UP_TIMEOUT_S, "dispatch run going")
            outcome.up_s = time.monotonic() - started
            outcome.runs_going = self.runs_going()
        except RuntimeError as exc:
            outcome.problems.append(f"[timeout] {exc}")
        stopping = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(plan.stop_signal)  # the demo alone, as a terminal's Ctrl-C reaches it
        try:
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline:
                self.orphans.reap(proc.pid)
                time.sleep(POLL_S)
            if proc.poll() is None:
                outcome.problems.append(f"[timeout] the demo did not stop within {STOP_TIMEOUT_S:.0f} s")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        finally:
            outcome.exit_code = proc.returncode
            outcome.stop_s = time.monotonic() - stopping
        self.check(outcome, mark, [log, *([self.daemon_log] if plan.kind == "headless" else [])], daemon_offset)
        return outcome

    def check(self, outcome: Outcome, mark: str, logs: list[Path], daemon_offset: int) -> None:
        if outcome.exit_code != 0:
            outcome.problems.append(f"[exit] stage-e demo exited with code {outcome.exit_code}")
        # Whatever the demo left is waited for a moment: a leftover must still be there after it.
        deadline = time.monotonic() + 10
        while (left := marked(mark)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self.orphans.reap(-1)
        outcome.problems += [f"[left] {p}" for p in left]
        outcome.problems += self.orphans.ended_by_signal
        self.orphans.ended_by_signal = []
        for path in logs:
            text = self.log_text(path, daemon_offset if path == self.daemon_log else 0)
            outcome.problems += [f"{kind} {path.name}: {line}" for kind, line in bad_lines(text)]


def line(o: Outcome, total: int) -> str:
    distinct = list(dict.fromkeys(o.problems))
    verdict = "ok" if not o.problems else f"FAILED ({len(o.problems)}): " + "; ".join(distinct[:3])
    return (f"cycle {o.plan.number:3d}/{total} {o.plan.kind:8s} {o.plan.stop_signal.name:7s} "
            f"runs going at the stop {o.runs_going}  up {o.up_s:5.1f} s  stop {o.stop_s:5.1f} s  "
            f"exit {o.exit_code}  {verdict}")


def summary(outcomes: list[Outcome], wall_s: float) -> str:
    failed = [o for o in outcomes if o.problems]
    in_flight = sum(o.runs_going > 0 for o in outcomes)
    kinds = {k: sum(o.plan.kind == k for o in outcomes) for k in ("ui", "headless")}
    signals = {s.name: sum(o.plan.stop_signal == s for o in outcomes) for s in (signal.SIGINT, signal.SIGTERM)}
    stops = sorted(o.stop_s for o in outcomes)
    kinds_seen = sorted({p.split("]", 1)[0] + "]" for o in failed for p in o.problems})
    by_kind = ", ".join(f"{k} in {sum(any(p.startswith(k) for p in o.problems) for o in outcomes)}"
                        for k in kinds_seen) or "none"
    return (f"{len(outcomes)} cycles in {wall_s / 60:.1f} min: {len(outcomes) - len(failed)} clean, {len(failed)} "
            f"failed (UI demo {kinds['ui']}, headless daemon {kinds['headless']}; stopped with a run going "
            f"{in_flight}; SIGINT {signals['SIGINT']}, SIGTERM {signals['SIGTERM']}); stop median "
            f"{stops[len(stops) // 2]:.1f} s, longest {stops[-1]:.1f} s; problems by kind (cycles): {by_kind}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=50, help="start-stop cycles (default 50)")
    parser.add_argument("--cards", type=int, default=6, help="cards the first cycle seeds")
    parser.add_argument("--keep", type=Path, help="keep the state folder and logs here instead of a temporary one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stage-e-cycles-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        cycles = Cycles(folder, args.cards)
        outcomes: list[Outcome] = []
        started = time.monotonic()
        for number in range(1, args.cycles + 1):
            outcome = cycles.run(Plan.of(number))
            outcomes.append(outcome)
            print(line(outcome, args.cycles), flush=True)
        print(summary(outcomes, time.monotonic() - started), flush=True)
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
