"""Helpers the dispatch benchmarks share: a throwaway PostgreSQL database, a seeded corpus to copy,
the environment a tick, run or daemon reads, a daemon child process, and the summary statistics
they print. Not part of the library."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Self, Sequence

import psutil
import sqlalchemy as sa

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card, MicroBatch
from stage_e_dagster.code_server import code_server_answers, free_port, grpc_server_command, grpc_workspace
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.defs.dagster_internals import daemon_environment
from stage_e_dagster.defs.instance import (
    EMBEDDED_INSTANCE_YAML,
    PROJECT_ROOT,
    WORKSPACE_YAML,
    create_instance_storage,
)
from stage_e_dagster.process_groups import start_group, stop_group

BIN = Path(sys.executable).parent
PG_SERVER = os.environ.get("STAGE_E_BENCH_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


@contextmanager
def pg_database(prefix: str) -> Iterator[str]:
    """Create an empty PostgreSQL database on the local server, yield its URL, drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    server = sa.create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(PG_SERVER).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        server.dispose()


def streaming_environment(state_dir: Path, *, database_url: str, image_roots: Path | None = None,
                          batch_size: int = 25) -> None:
    """Turn streaming on for this process, with envelope bars a benchmark cannot cross.

    The default host-load ceiling is the core count; other jobs on a 2-core machine push the load
    over it, and a tick would then open a trip and skip instead of selecting work. The benchmarks
    measure dispatch cost, not the envelope, so no bar may stop them halfway.
    """
    os.environ.update({
        "STAGE_E_STREAMING_ENABLED": "true",
        "STAGE_E_STATE_DIR": str(state_dir),
        "STAGE_E_DATABASE_URL": database_url,
        "STAGE_E_MICRO_BATCH_SIZE": str(batch_size),
        "STAGE_E_MAX_CONCURRENT_DISPATCHES": "2",
        "STAGE_E_HOST_LOAD_CEILING": "1000",
        "STAGE_E_CPU_PRESSURE_CEILING": "100",
        "STAGE_E_RSS_MB_CEILING": "100000",
        # The synthetic corpus has ~5% broken images on purpose; each is a counted fetch failure.
        "STAGE_E_FETCH_FAILURE_RATE_CEILING": "1",
    })
    if image_roots is not None:
        os.environ["STAGE_E_IMAGE_ROOTS"] = str(image_roots)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between the sorted values."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def short_count(n: int) -> str:
    """1000000 -> 1M, 10000 -> 10k, 2500 -> 2.5k."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            value = n / size
            return f"{value:g}{suffix}"
    return str(n)


def seed_template(folder: Path, cards: int, seed: int) -> tuple[Path, Path]:
    """A migrated SQLite catalogue with ``cards`` seeded cards, and the corpus folder holding their images.

    Seeding renders every image, so it is done once; each arm of a benchmark drains its own copy
    (:func:`fresh_copy`) and reads the same images."""
    path = folder / "template.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    started = time.perf_counter()
    summary = seed_corpus(engine, folder / "corpus", cards=cards, seed=seed)
    engine.dispose()
    print(f"seeded {summary.cards} cards ({summary.printings} printings, broken {summary.broken}) "
          f"in {time.perf_counter() - started:.1f} s", flush=True)
    return path, summary.images_dir.parent


def fresh_copy(template: Path, folder: Path, name: str) -> str:
    """A copy of the template catalogue for one arm; returns its URL."""
    target = folder / f"{name}.sqlite"
    shutil.copy(template, target)
    return f"sqlite:///{target}"


def plain_engine(url: str) -> sa.Engine:
    """An engine without the catalogue's ``BEGIN IMMEDIATE``: reads take no write lock, so polling
    the catalogue does not queue the writers being measured; also what an outside writer uses."""
    return sa.create_engine(url, connect_args={"timeout": 30})


def backlog(engine: sa.Engine) -> tuple[int, int]:
    """Cards waiting for Stage C or Stage D, and micro-batches pending or running: (0, 0) is drained."""
    with engine.connect() as conn:
        waiting = conn.execute(sa.select(sa.func.count()).select_from(Card).where(
            sa.or_(STAGE_C_PENDING, STAGE_D_PENDING))).scalar_one()
        in_flight = conn.execute(sa.select(sa.func.count()).select_from(MicroBatch).where(
            MicroBatch.status.in_(("pending", "running")))).scalar_one()
    return waiting, in_flight


def child_environment(home: Path, **overrides: str) -> dict[str, str]:
    """The environment for a ``dagster-daemon`` or ``stage-e`` child: this process's ``STAGE_E_*``
    settings, its own ``DAGSTER_HOME`` (given the project's ``dagster.yaml``), what every daemon the
    project starts runs with (``daemon_environment``) and ``overrides``."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EMBEDDED_INSTANCE_YAML, home / "dagster.yaml")
    create_instance_storage(home)  # before the daemon and its code server start on it
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_")}
    return daemon_environment(env | {"DAGSTER_HOME": str(home)} | overrides)


@contextmanager
def running_daemon(env: dict[str, str], log_path: Path,
                   workspace: Path = WORKSPACE_YAML) -> Iterator[subprocess.Popen[bytes]]:
    """``dagster-daemon run`` on ``workspace`` (the project's own by default, where the daemon starts
    its code server); stopped on exit (SIGTERM to its process group, SIGKILL after 30 s), which also
    ends a code server it started and any run worker that server launched."""
    with open(log_path, "ab") as log:
        daemon = start_group([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], env=env,
                             cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield daemon
    finally:
        # The code server and run workers may still be writing to the state folder the caller is
        # about to delete: the whole group is waited for.
        stop_group(daemon)


@contextmanager
def serving_code(env: dict[str, str], log_path: Path, folder: Path,
                 timeout_s: float = 120.0) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The code location's own gRPC server (``dagster api grpc``, as the Helm chart's user-code
    deployment runs it) and a workspace file in ``folder`` that loads it; yielded once it answers.
    Stopped on exit with its process group, which holds the run workers it launched."""
    port = free_port()
    workspace = folder / f"workspace-{port}.yaml"
    workspace.write_text(grpc_workspace(port))
    with open(log_path, "ab") as log:
        server = start_group(grpc_server_command(port), env=env, cwd=PROJECT_ROOT, stdout=log,
                             stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not code_server_answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"code server on port {port} did not answer (exit {server.poll()}); "
                                 f"log tail:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield server, workspace
    finally:
        stop_group(server)


class Periodic:
    """``sample()`` every ``every_s`` seconds in a daemon thread, from the ``with`` block's start to its end."""

    def __init__(self, every_s: float) -> None:
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._every_s)


class TreeCpu(Periodic):
    """CPU seconds of processes and their descendants, by kind, sampled every ``every_s`` in a thread.

    A process is counted by its last sample, so what it did after that is lost: at 1 s, under a second
    of each process that ends. Kinds: ``daemon``, ``code server`` (a daemon on a ``python_module``
    workspace starts a new one every 60 s), ``worker`` (a Dagster run or a bulk pool worker, both
    started by multiprocessing's spawn), and ``other`` (the root, trackers, log tails). For each
    worker its busy share (CPU over the time it was seen) is kept too."""

    def __init__(self, *root_pids: int, every_s: float = 1.0) -> None:
        super().__init__(every_s)
        self._roots = [psutil.Process(pid) for pid in root_pids]
        self._seen: dict[int, tuple[str, float, float, float]] = {}  # pid -> kind, cpu, first seen, last seen

    @staticmethod
    def kind(command: str) -> str:
        if "multiprocessing.spawn" in command:
            return "worker"
        if "dagster api grpc" in command or "dagster code-server" in command:
            return "code server"
        if "dagster-daemon" in command:
            return "daemon"
        return "other"

    def sample(self) -> None:
        processes: list[psutil.Process] = []
        for root in self._roots:
            try:
                processes += [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
        now = time.time()
        for process in processes:
            try:
                times = process.cpu_times()
                known = self._seen.get(process.pid)
                kind = known[0] if known else self.kind(" ".join(process.cmdline()))
                self._seen[process.pid] = (kind, times.user + times.system, known[2] if known else now, now)
            except psutil.Error:
                continue

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """Kind -> (processes, CPU seconds)."""
        totals: dict[str, tuple[int, float]] = {}
        for kind, cpu, _, _ in self._seen.values():
            count, seconds = totals.get(kind, (0, 0.0))
            totals[kind] = (count + 1, seconds + cpu)
        return totals

    def sightings(self, kind: str) -> list[tuple[int, float, float]]:
        """(pid, first seen, last seen) of each process of ``kind``, by first sighting (``time.time()`` of
        the samples): a process started up to ``every_s`` before its first sighting and ended up to
        ``every_s`` after its last. Only the roots' descendants are seen, from the ``with`` block's start."""
        return sorted(((pid, first, last) for pid, (seen_kind, _, first, last) in self._seen.items()
                       if seen_kind == kind), key=lambda seen: (seen[1], seen[0]))

    def worker_busy(self) -> list[float]:
        """Each worker's CPU over the time it was seen (1.0: never waited for a core or anything else),
        for the workers seen for ten samples or more (a shorter life says little)."""
        return [cpu / (last - first) for kind, cpu, first, last in self._seen.values()
                if kind == "worker" and last - first > 10 * self._every_s]
