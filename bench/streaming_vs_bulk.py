"""Streaming where a user would compare it, at the shipped settings: the real ``dagster-daemon`` against
``stage-e bulk``, and the governor beside a busy neighbour.

Three questions an operator asks before switching streaming on:

  1. Throughput: does streaming drain a backlog about as fast as the bulk tool would? One synthetic
     corpus is seeded once (rendered images, the real PP-OCR reader in Stage C, ~5% broken images);
     each side drains its own copy of the catalogue, in its own state folder and ``DAGSTER_HOME``:
       * bulk:   ``stage-e bulk --stage all --workers N`` (N: the usable CPUs), timed from the
                 command's start to its exit;
       * stream: the code location's own gRPC server (``dagster api grpc``, as the Helm chart
                 runs it) and ``dagster-daemon run`` loading it through a ``grpc_server`` workspace,
                 as production runs them (docs/operations.md, "Running on PostgreSQL"; ``dg dev``
                 shares one code server the same way), with the project's ``dagster.yaml`` and the shipped settings:
                 batches sized by work, ``STAGE_E_MAX_CONCURRENT_DISPATCHES`` and every envelope bar
                 at its default (the contention governor included). Timed from the code server's
                 start, with the backlog already in the catalogue, to the backlog empty (no
                 card pending either stage, no micro-batch pending or running): what a user meets
                 who turns streaming on over a backlog. The drain from the first run's start is
                 printed beside (with when the first run was created and started), and the governed
                 concurrency sampled every ``SAMPLE_S`` over it.
     With ``--reps`` above 1 the order alternates, so drifting load hits both sides alike, and each
     repetition's own ratio is printed beside the pooled one.
  2. Latency: on a trickle into an idle daemon (the stream side of the last repetition, once
     drained), how long from a card's insert commit to its ``image_evidence`` row? The trickled
     cards are readable seeded cards held back from the catalogue and inserted with raw SQL, as any
     writer would, one every ``--trickle-every`` seconds.
  3. A busy neighbour: a streaming drain of a larger backlog (the corpus's cards inserted
     ``--neighbour-copies`` times), and ``WARM_S`` after its first run starts, one CPU-bound process
     per usable CPU, started and stopped by this bench, for ``--neighbour-s`` seconds, then watched
     as long again. The governed concurrency, CPU pressure and load average are printed every
     ``SAMPLE_S`` seconds. Expected: below the cap within a minute of the neighbour's start, no
     trip, and back at the cap once it stops. The neighbour runs for less than the sustained
     period a trip needs at the floor (``STAGE_E_HOST_LOAD_TRIP_AFTER_S``, 120 s), so a trip here
     means the governor tripped while it could still back off.

The one setting changed from its default is ``STAGE_E_FETCH_FAILURE_RATE_CEILING`` (to 1): the
corpus's broken images are made on purpose and must not trip the fetch-failure bar halfway.

Usage:
  python bench/streaming_vs_bulk.py --cards 1000                          # the figures (~15 min quiet)
  python bench/streaming_vs_bulk.py --reps 2                              # bulk, stream, stream, bulk
  python bench/streaming_vs_bulk.py --cards 60 --trickle 2 --trickle-every 2 --neighbour-s 20   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import (  # noqa: E402
    BIN,
    PROJECT_ROOT,
    Periodic,
    TreeCpu,
    backlog,
    child_environment,
    fresh_copy,
    median,
    plain_engine,
    running_daemon,
    seed_template,
    serving_code,
)

from stage_e_dagster.catalog.models import Card, EnvelopeTrip, MicroBatch, PoolControl  # noqa: E402
from stage_e_dagster.defs.dagster_internals import run_events  # noqa: E402
from stage_e_dagster.defs.run_ends import runs_in_progress  # noqa: E402
from stage_e_dagster.defs.tags import DISPATCH_POOL, PARTITION_TAG  # noqa: E402
from stage_e_dagster.envelope.signals import CpuPressure  # noqa: E402
from stage_e_dagster.settings import load_settings, usable_cpus  # noqa: E402

POLL_S = 0.2
SAMPLE_S = 2.0
# The neighbour arm's drain runs this long (or --neighbour-s if shorter) before the neighbour starts.
WARM_S = 30.0
BUSY_NEIGHBOUR = [sys.executable, "-c", "while True: pass"]
# The drain's per-run timeline prints at most this many runs (a 1,000-card drain has a handful).
TIMELINE_RUNS = 40
# What a ``dagster api grpc`` started with ``--heartbeat`` logs when its client stopped sending heartbeats.
NO_HEARTBEAT = "No heartbeat received"
HEARTBEAT_LINES = 10
INSERT_CARD = sa.text(
    "INSERT INTO cards (identifier, name, image_locator, card_type, dpi, declared_content_hash) "
    "VALUES (:identifier, :name, :image_locator, :card_type, :dpi, :declared_content_hash)"
)
CARD_COLUMNS = (Card.identifier, Card.name, Card.image_locator, Card.card_type, Card.dpi, Card.declared_content_hash)


@dataclass
class BulkDrain:
    cards: int
    wall_s: float
    report: dict[str, object]
    cpu: dict[str, tuple[int, float]] = field(default_factory=dict)  # TreeCpu.by_kind over the command
    busy: list[float] = field(default_factory=list)  # each pool worker's CPU over its life


@dataclass(frozen=True)
class Sample:
    at_s: float
    governed: int | None
    pressure: float | None
    load: float
    trips: int


@dataclass(frozen=True)
class RunLine:
    """One dispatch run of a drain, its times in seconds from the services' start."""

    run_id: str
    batch: str | None  # its partition: the micro-batch's key
    cards: int | None  # the cards in that micro-batch (``micro_batches.card_ids``)
    created_s: float
    started_s: float | None
    ended_s: float | None
    status: str
    enqueued: int  # PIPELINE_ENQUEUED events: above 1, the run queue re-submitted it (its launch failed)


@dataclass
class StreamDrain:
    cards: int
    wall_s: float
    from_first_run_s: float
    first_run_created_s: float  # from the services' start to the first dispatch run's creation (a tick's request)
    runs: int
    failed_runs: int
    samples: list[Sample]
    latencies_s: list[float] = field(default_factory=list)
    # This process's own CPU over the drain (its polls and the sampler): what it took from the side it timed.
    bench_cpu_s: float = 0.0
    cpu: dict[str, tuple[int, float]] = field(default_factory=dict)  # TreeCpu.by_kind over the drain
    busy: list[float] = field(default_factory=list)  # each run worker's CPU over its life
    started_at: float = 0.0  # the services' start, time.time()
    # (pid, first, last sighting in s from the services' start) of each code server TreeCpu saw: one that
    # replaced another mid-drain shows as a second pid first seen then.
    code_servers: list[tuple[int, float, float]] = field(default_factory=list)
    timeline: list[RunLine] = field(default_factory=list)  # the drain's dispatch runs, by start
    no_heartbeat: list[str] = field(default_factory=list)  # the services' log lines saying NO_HEARTBEAT


@dataclass
class Side:
    """One side's copy of the catalogue, its state folder, its ``DAGSTER_HOME`` and its environment."""

    name: str
    url: str
    home: Path
    env: dict[str, str]

    @classmethod
    def fresh(cls, template: Path, folder: Path, name: str) -> "Side":
        url = fresh_copy(template, folder, name)
        home = folder / f"{name}-dagster_home"
        env = child_environment(home, STAGE_E_STATE_DIR=str(folder / f"{name}-state"), STAGE_E_DATABASE_URL=url)
        return cls(name, url, home, env)


class Sampler(Periodic):
    """Every ``SAMPLE_S``, in a thread: the governed concurrency (``pool_controls``), CPU pressure, the
    load average and the trips opened, on the clock of ``started``."""

    def __init__(self, url: str, started: float) -> None:
        super().__init__(SAMPLE_S)
        self.engine = plain_engine(url)
        self.started = started
        self.samples: list[Sample] = []
        self.pressure = CpuPressure(load_settings().cpu_pressure_file)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.engine.dispose()

    def sample(self) -> None:
        try:
            with self.engine.connect() as conn:
                governed = conn.execute(sa.select(PoolControl.governed_limit)
                                        .where(PoolControl.pool == DISPATCH_POOL)).scalar_one_or_none()
                trips = conn.execute(sa.select(sa.func.count()).select_from(EnvelopeTrip)).scalar_one()
        except sa.exc.OperationalError:  # the catalogue busy past the timeout: skip this sample
            return
        self.samples.append(Sample(time.time() - self.started, governed, self.pressure.read(),
                                   os.getloadavg()[0], trips))


def readable_tail(corpus: Path, count: int) -> list[str]:
    """The identifiers of the last ``count`` readable seeded cards: the trickle's real, unseen images
    (a broken one would skip OCR and flatter the latency)."""
    labels = [json.loads(line) for line in (corpus / "labels.jsonl").read_text().splitlines()]
    return [label["identifier"] for label in labels if label["broken"] is None][-count:] if count else []


def take_out(url: str, identifiers: list[str]) -> list[dict[str, object]]:
    """Delete these cards from a catalogue copy and return their rows, for inserting again later."""
    engine = plain_engine(url)
    chosen = Card.identifier.in_(identifiers)
    with engine.begin() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(*CARD_COLUMNS).where(chosen).order_by(Card.id)).mappings()]
        conn.execute(sa.delete(Card).where(chosen))
    engine.dispose()
    return rows


def add_copies(url: str, copies: int) -> int:
    """Insert every card ``copies - 1`` more times (new identifiers, the same images): a backlog that
    outlasts the neighbour. Returns the cards now in the catalogue."""
    engine = plain_engine(url)
    with engine.begin() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(*CARD_COLUMNS).order_by(Card.id)).mappings()]
        for copy in range(1, copies):
            conn.execute(INSERT_CARD, [row | {"identifier": f"{row['identifier']}~{copy}"} for row in rows])
    total = card_count(engine)
    engine.dispose()
    return total


def card_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(Card)).scalar_one()


def drain_with_bulk(side: Side, workers: int, timeout_s: float) -> BulkDrain:
    """``stage-e bulk --stage all``: what an operator runs by hand over a backlog."""
    command = [str(BIN / "stage-e"), "bulk", "--stage", "all", "--workers", str(workers), "--json"]
    started = time.perf_counter()
    bulk = subprocess.Popen(command, env=side.env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    with TreeCpu(bulk.pid) as cpu:
        try:
            stdout, stderr = bulk.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:  # as subprocess.run does: no bulk left running past its timeout
            bulk.kill()
            bulk.communicate()
            raise
    wall = time.perf_counter() - started
    if bulk.returncode != 0:
        raise SystemExit(f"bulk failed (exit {bulk.returncode}):\n{stdout[-2000:]}\n{stderr[-2000:]}")
    reader = plain_engine(side.url)
    left, cards = backlog(reader), card_count(reader)
    reader.dispose()
    if left[0]:
        raise SystemExit(f"bulk exited with {left[0]} cards still pending: the sides would not do the same work")
    return BulkDrain(cards, wall, json.loads(stdout.strip().splitlines()[-1]), cpu.by_kind(), cpu.worker_busy())


@contextmanager
def streaming(side: Side, folder: Path, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """The stream side as production runs it (docs/operations.md): the code location's own code
    server, then ``dagster-daemon run`` loading it through a ``grpc_server`` workspace. Both log to ``log``."""
    with serving_code(side.env, log, folder) as (server, workspace), \
            running_daemon(side.env, log, workspace) as daemon:
        yield server, daemon


def wait_until(done: Callable[[], bool], daemon: subprocess.Popen[bytes], log: Path, timeout_s: float,
               what: str) -> None:
    deadline = time.perf_counter() + timeout_s
    while not done():
        if daemon.poll() is not None or time.perf_counter() > deadline:
            raise SystemExit(f"stream side: no {what} (daemon exit {daemon.poll()}); log tail:\n"
                             f"{log.read_text()[-3000:]}")
        time.sleep(POLL_S)


def dispatch_records(instance: DagsterInstance) -> list:  # type: ignore[type-arg]
    return instance.get_run_records(RunsFilter(tags={"stage_e/dispatch": "micro-batch"}))


def first_start(records: list) -> float | None:  # type: ignore[type-arg]
    """The earliest start among run ``records`` (None while none has started)."""
    starts = [r.start_time for r in records if r.start_time is not None]
    return min(starts) if starts else None


def run_timeline(instance: DagsterInstance, records: list, reader: sa.Engine,  # type: ignore[type-arg]
                 started: float) -> list[RunLine]:
    """Each dispatch run's batch, times, status and enqueue count, ordered by start (unstarted last)."""
    keys = [r.dagster_run.tags.get(PARTITION_TAG) for r in records]
    with reader.connect() as conn:
        sizes = {key: len(ids or []) for key, ids in conn.execute(
            sa.select(MicroBatch.batch_key, MicroBatch.card_ids).where(MicroBatch.batch_key.in_(
                [k for k in keys if k])))}
    lines = [RunLine(
        r.dagster_run.run_id, key, sizes.get(key), r.create_timestamp.timestamp() - started,
        None if r.start_time is None else r.start_time - started,
        None if r.end_time is None else r.end_time - started, r.dagster_run.status.value,
        len(run_events(instance, r.dagster_run.run_id, DagsterEventType.PIPELINE_ENQUEUED)),
    ) for r, key in zip(records, keys)]
    return sorted(lines, key=lambda x: (x.started_s is None, x.started_s or 0.0, x.created_s))


def no_heartbeat_lines(log: Path) -> list[str]:
    """The lines of the services' log (the daemon's and the code server's output, both appended to
    ``log`` by ``streaming``) that say a code server got no heartbeat. The bench's own code server runs
    without ``--heartbeat``, so it never logs one; a code server the daemon starts itself (a
    ``python_module`` workspace) does, with ``--heartbeat-timeout 20``."""
    if not log.exists():
        return []
    return [line.strip() for line in log.read_text(errors="replace").splitlines() if NO_HEARTBEAT in line]


def drain_with_daemon(side: Side, folder: Path, timeout_s: float, trickle: list[dict[str, object]],
                      every_s: float) -> StreamDrain:
    """The daemon started on the catalogue with its backlog in it, timed from its start to the backlog
    empty; then, if asked, the trickle into it while it idles."""
    reader = plain_engine(side.url)
    instance = DagsterInstance.from_config(str(side.home))
    log = folder / f"{side.name}-daemon.log"
    started, own_cpu = time.time(), time.process_time()
    with streaming(side, folder, log) as (server, daemon), Sampler(side.url, started) as sampler:
        with TreeCpu(server.pid, daemon.pid) as cpu:
            wait_until(lambda: backlog(reader) == (0, 0), daemon, log, timeout_s, "empty backlog")
            cpu.sample()
        code_servers = [(pid, first - started, last - started) for pid, first, last in cpu.sightings("code server")]
        drained_at, own_cpu = time.time(), time.process_time() - own_cpu
        cards = card_count(reader)
        # Let the last runs write their final events, so the trickle starts on an idle daemon.
        wait_until(lambda: runs_in_progress(instance) == 0, daemon, log, 120, "idle daemon")
        records = dispatch_records(instance)
        first_started = first_start(records)
        first_created = min((r.create_timestamp.timestamp() for r in records), default=started)
        timeline = run_timeline(instance, records, reader, started)
        samples = [s for s in sampler.samples if s.at_s <= drained_at - started]
        latencies = trickle_latencies(side.url, trickle, every_s, daemon, log) if trickle else []
        if trickle:
            wait_until(lambda: backlog(reader) == (0, 0) and runs_in_progress(instance) == 0,
                       daemon, log, 120, "idle daemon after the trickle")
    # Read once the services have stopped, so the whole log is in (the work folder goes unless --keep).
    no_heartbeat = no_heartbeat_lines(log)
    failed = sum(r.dagster_run.status != DagsterRunStatus.SUCCESS for r in records)
    instance.dispose()
    reader.dispose()
    return StreamDrain(cards, drained_at - started, drained_at - (first_started or started), first_created - started,
                       len(records), failed, samples, latencies, own_cpu, cpu.by_kind(), cpu.worker_busy(),
                       started, code_servers, timeline, no_heartbeat)


def trickle_latencies(url: str, rows: list[dict[str, object]], every_s: float, daemon: subprocess.Popen[bytes],
                      log: Path, timeout_s: float = 120.0) -> list[float]:
    """Insert one card every ``every_s`` seconds (raw SQL, its own transaction) and time each from its
    commit to its ``image_evidence`` row, polling the catalogue every ``POLL_S``."""
    engine = plain_engine(url)
    committed: dict[int, float] = {}
    latencies: dict[int, float] = {}
    next_insert = time.perf_counter()
    queue = list(rows)
    deadline = float("inf")
    while len(latencies) < len(rows):
        now = time.perf_counter()
        if queue and now >= next_insert:
            with engine.begin() as conn:
                card_id = conn.execute(INSERT_CARD, queue.pop(0)).lastrowid
            committed[card_id] = time.perf_counter()
            next_insert += every_s
            if not queue:
                deadline = committed[card_id] + timeout_s
        waiting = [c for c in committed if c not in latencies]
        if waiting:
            with engine.connect() as conn:
                found = conn.execute(sa.text("SELECT DISTINCT card_id FROM image_evidence WHERE card_id IN :ids")
                                     .bindparams(sa.bindparam("ids", expanding=True)), {"ids": waiting}).scalars()
                seen = time.perf_counter()
                for card_id in found:
                    latencies[card_id] = seen - committed[card_id]
                    print(f"  trickle card {card_id}: evidence {latencies[card_id]:.2f} s after its insert", flush=True)
        if daemon.poll() is not None or now > deadline:
            raise SystemExit(f"trickle: {len(rows) - len(latencies)} cards without evidence; log tail:\n"
                             f"{log.read_text()[-3000:]}")
        time.sleep(POLL_S)
    engine.dispose()
    return [latencies[c] for c in committed]


def beside_a_neighbour(side: Side, folder: Path, copies: int, neighbour_s: float, processes: int) -> None:
    """A streaming drain with a CPU-bound neighbour from ``WARM_S`` after the first run's start, for
    ``neighbour_s``, watched for as long again after it stops; prints the timeline and verdicts."""
    total = add_copies(side.url, copies)
    cap = load_settings().max_concurrent_dispatches
    print(f"neighbour arm: {total} cards, cap {cap}; {processes} busy process(es) for {neighbour_s:.0f} s", flush=True)
    reader = plain_engine(side.url)
    instance = DagsterInstance.from_config(str(side.home))
    log = folder / f"{side.name}-daemon.log"
    started = time.time()
    busy: list[subprocess.Popen[bytes]] = []
    with streaming(side, folder, log) as (_, daemon), Sampler(side.url, started) as sampler:
        wait_until(lambda: first_start(dispatch_records(instance)) is not None, daemon, log, 300,
                   "first dispatch run")
        first = first_start(dispatch_records(instance))
        begin_at = first + min(WARM_S, neighbour_s) - started  # type: ignore[operator]
        try:
            while time.time() - started < begin_at:
                time.sleep(POLL_S)
            busy = [subprocess.Popen(BUSY_NEIGHBOUR) for _ in range(processes)]
            time.sleep(neighbour_s)
        finally:
            for process in busy:
                process.kill()
                process.wait()
        end_at = time.time() - started
        time.sleep(neighbour_s)
        drained = backlog(reader) == (0, 0)
        samples = list(sampler.samples)
    instance.dispose()
    reader.dispose()
    print(f"  {'t (s)':>6} {'governed':>8} {'cpu pressure':>12} {'load 1m':>8} {'trips':>5}")
    for s in samples:
        phase = "neighbour" if begin_at <= s.at_s < end_at else ""
        pressure = "-" if s.pressure is None else f"{s.pressure:.1f}"
        print(f"  {s.at_s:6.1f} {s.governed if s.governed is not None else '-':>8} {pressure:>12} "
              f"{s.load:8.2f} {s.trips:5d}  {phase}")
    before = [s for s in samples if s.at_s < begin_at]
    during = [s for s in samples if begin_at <= s.at_s < end_at]
    backed_off = next((s.at_s - begin_at for s in during if s.governed is not None and s.governed < cap), None)
    recovered = next((s.at_s - end_at for s in samples if s.at_s >= end_at and s.governed == cap), None)
    trips = samples[-1].trips if samples else 0
    at_start = before[-1].governed if before else None
    print(f"neighbour arm: governed concurrency {at_start} (cap {cap}) when the neighbour started"
          + ("" if at_start == cap else ": already below the cap, the host was contended before it")
          + "; below the cap "
          + (f"{backed_off:.0f} s after the neighbour started" if backed_off is not None else "NEVER")
          + " (expected within 60 s); trips opened: " + str(trips) + " (expected 0); back at the cap "
          + (f"{recovered:.0f} s after it stopped" if recovered is not None else "NOT within the watch")
          + ("" if not drained else " (backlog drained before the watch ended)"))


def governed_summary(samples: list[Sample]) -> str:
    spread = Counter(s.governed for s in samples)
    return ", ".join(f"{limit if limit is not None else 'unset'} for {n}" for limit, n in sorted(
        spread.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))) + f" of {len(samples)} samples"


def cpu_line(b: BulkDrain, s: StreamDrain) -> str:
    """Where the stream's seconds go: a card's CPU in a run worker against a bulk worker's, how busy each
    worker was (waiting for a core counts as idle), and what the daemon and its code servers took."""
    def workers(side: str, cards: int, cpu: dict[str, tuple[int, float]], busy: list[float]) -> str:
        count, seconds = cpu.get("worker", (0, 0.0))
        shares = ", ".join(f"{x:.0%}" for x in sorted(busy)) or "-"
        return f"{count} {side} workers {seconds:.1f} s ({seconds / max(cards, 1):.3f} s a card; busy {shares})"

    _, daemon_s = s.cpu.get("daemon", (0, 0.0))
    servers, server_s = s.cpu.get("code server", (0, 0.0))
    return (f"{workers('bulk', b.cards, b.cpu, b.busy)}; {workers('run', s.cards, s.cpu, s.busy)}; beside the runs: "
            f"daemon {daemon_s:.1f} s, {servers} code server(s) {server_s:.1f} s "
            f"({(daemon_s + server_s) / s.wall_s:.2f} of a core over the drain)")


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def timeline_lines(label: str, s: StreamDrain) -> list[str]:
    """The stream drain's timeline, in seconds from the services' start: each code server seen (a second
    pid first seen mid-drain is a replacement), each dispatch run by start, how unevenly the last runs
    ended, and any no-heartbeat line of the services' log."""
    clock = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(s.started_at))
    servers = "; ".join(f"pid {pid} seen {first:.1f}-{last:.1f}" for pid, first, last in s.code_servers) or "none seen"
    out = [f"{label} code servers (s from the services' start at {clock}, first-last sighting, 1 s samples): "
           f"{servers}"]
    requeued = sum(run.enqueued > 1 for run in s.timeline)
    out.append(f"{label} stream runs by start, {len(s.timeline)} runs, {requeued} enqueued more than once "
               f"(s from the services' start): run, batch, cards, created, started, ended, status, enqueued")
    for run in s.timeline[:TIMELINE_RUNS]:
        out.append(f"  {run.run_id[:8]} {run.batch or '-'} {run.cards if run.cards is not None else '-'} "
                   f"{seconds(run.created_s)} {seconds(run.started_s)} {seconds(run.ended_s)} {run.status} "
                   f"{run.enqueued}")
    if len(s.timeline) > TIMELINE_RUNS:
        out.append(f"  ... {len(s.timeline) - TIMELINE_RUNS} more")
    # The uneven end: the last run's end minus the end of the run that ended just before it. When those
    # two overlapped (the last one started before the other ended), this is how long the drain's end
    # waited on one run while the other's worker had nothing left: at a cap of 2, a core idle at the tail.
    ended = sorted((run for run in s.timeline if run.ended_s is not None), key=lambda run: run.ended_s or 0.0)
    if len(ended) >= 2:
        last, before = ended[-1], ended[-2]
        overlapped = last.started_s is not None and before.ended_s is not None and last.started_s < before.ended_s
        out.append(f"{label} runs' last end spread: {last.ended_s - before.ended_s:.1f} s "  # type: ignore[operator]
                   + ("(the last two runs overlapped)" if overlapped
                      else "(the last run started after the one before it ended: no overlap)"))
    else:
        out.append(f"{label} runs' last end spread: - (fewer than two runs ended)")
    shown = s.no_heartbeat[:HEARTBEAT_LINES]
    out.append(f"{label} '{NO_HEARTBEAT}' lines in the daemon's and code server's log: {len(s.no_heartbeat)}")
    out += [f"  {line}" for line in shown]
    if len(s.no_heartbeat) > len(shown):
        out.append(f"  ... {len(s.no_heartbeat) - len(shown)} more")
    return out


def report(bulks: list[BulkDrain], streams: list[StreamDrain], workers: int) -> None:
    print()
    per_rep: list[float] = []
    for i, (b, s) in enumerate(zip(bulks, streams), start=1):
        per_rep.append(b.wall_s / s.wall_s * s.cards / b.cards)
        print(f"rep {i}: bulk {b.cards} cards in {b.wall_s:.1f} s ({b.cards / b.wall_s:.3f} cards/s); stream "
              f"{s.cards} cards in {s.wall_s:.1f} s from the services' start ({s.cards / s.wall_s:.3f} cards/s), "
              f"{s.from_first_run_s:.1f} s from first run start; first run created {s.first_run_created_s:.1f} s "
              f"and started {s.wall_s - s.from_first_run_s:.1f} s after the services' start; {s.runs} runs, "
              f"{s.failed_runs} not successful; governed concurrency {governed_summary(s.samples)}; this "
              f"bench's own CPU over the drain {s.bench_cpu_s:.1f} s")
        print(f"rep {i} CPU: {cpu_line(b, s)}")
        for line in timeline_lines(f"rep {i}", s):
            print(line)
    cards = sum(b.cards for b in bulks)
    bulk_rate = cards / sum(b.wall_s for b in bulks)
    stream_rate = sum(s.cards for s in streams) / sum(s.wall_s for s in streams)
    first_run_rate = sum(s.cards for s in streams) / sum(s.from_first_run_s for s in streams)
    settings = load_settings()
    print(f"bulk   (stage-e bulk --stage all --workers {workers}): {bulk_rate:.3f} cards/s")
    print(f"stream (dagster-daemon, shipped settings: cap {settings.max_concurrent_dispatches}, cpu pressure bars "
          f"{settings.cpu_pressure_soft_bar:g}/{settings.cpu_pressure_ceiling:g}, load bars "
          f"{settings.host_load_soft_bar:g}/{settings.host_load_ceiling:g}): "
          f"{stream_rate:.3f} cards/s from the services' start, {first_run_rate:.3f} cards/s from first run start")
    print(f"ratio streaming/bulk: {stream_rate / bulk_rate:.3f} from the services' start   (target >= 0.9); "
          f"{first_run_rate / bulk_rate:.3f} from first run start")
    # One drain moves by several seconds with the machine's speed over that minute: each repetition's
    # own ratio shows how far apart they fell, beside the pooled one above (the target's figure).
    print(f"ratio per repetition: {', '.join(f'{r:.3f}' for r in per_rep)} (median {median(per_rep):.3f})")
    latencies = [x for s in streams for x in s.latencies_s]
    if latencies:
        print(f"trickle insert -> evidence, {len(latencies)} cards: p50 {median(latencies):.2f} s  "
              f"max {max(latencies):.2f} s   (target p50 <= 4 s)")


def main() -> int:
    cpus = load_settings().max_concurrent_dispatches  # the usable CPUs, unless the environment sets the cap
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=600, help="cards each side drains")
    parser.add_argument("--workers", type=int, default=cpus, help=f"bulk --workers (default: the cap, {cpus})")
    parser.add_argument("--trickle", type=int, default=10, help="cards inserted one by one into the idle daemon")
    parser.add_argument("--trickle-every", type=float, default=6.0, help="seconds between trickle inserts")
    parser.add_argument("--reps", type=int, default=1, help="drains per side, order alternating")
    parser.add_argument("--neighbour-s", type=float, default=60.0,
                        help="how long the neighbour runs, and the watch after it (0: no neighbour arm)")
    parser.add_argument("--neighbour-copies", type=int, default=4,
                        help="times the neighbour arm's backlog holds each card")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="keep the work folder here instead of a temporary one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="stage-e-svb-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        template, corpus = seed_template(folder, args.cards + args.trickle, args.seed)
        held = take_out(f"sqlite:///{template}", readable_tail(corpus, args.trickle))
        os.environ.update({
            "STAGE_E_STREAMING_ENABLED": "true",
            "STAGE_E_IMAGE_ROOTS": str(corpus),
            "STAGE_E_FETCH_FAILURE_RATE_CEILING": "1",  # the corpus's broken images are on purpose
        })
        timeout_s = max(600.0, 5.0 * args.cards)
        bulks: list[BulkDrain] = []
        streams: list[StreamDrain] = []
        for rep in range(args.reps):
            order = ("bulk", "stream") if rep % 2 == 0 else ("stream", "bulk")
            for kind in order:
                side = Side.fresh(template, folder, f"{kind}-{rep + 1}")
                print(f"rep {rep + 1}: {kind} draining {args.cards} cards", flush=True)
                if kind == "bulk":
                    bulks.append(drain_with_bulk(side, args.workers, timeout_s))
                else:
                    last = rep == args.reps - 1
                    streams.append(drain_with_daemon(side, folder, timeout_s, held if last else [],
                                                     args.trickle_every))
        report(bulks, streams, args.workers)
        if args.neighbour_s > 0:
            print()
            beside_a_neighbour(Side.fresh(template, folder, "neighbour"), folder, args.neighbour_copies,
                               args.neighbour_s, processes=max(1, int(usable_cpus())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
