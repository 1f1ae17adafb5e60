"""The figures behind the capacity model in ``docs/scaling.md``, measured in one run.

Three parts, each a ratio against a baseline measured in the same run:

  1. dispatch: one seeded corpus (rendered images, the real PP-OCR reader), two copies of its catalogue. The
     baseline drains one with ``stage-e bulk --stage all --workers 1``; the other is drained by the
     real ``dagster-daemon`` on the project's workspace and ``dagster.yaml`` (runs launched as
     processes, as the other daemon benches do), at the shipped settings (envelope bars included)
     but one dispatch slot (``STAGE_E_MAX_CONCURRENT_DISPATCHES=1``, for cards/s per run worker),
     batches sized by work (``dispatch/sizing.py``, ``STAGE_E_BATCH_TARGET_S``). So that the first
     batches are work-sized too, the stream copy's catalogue gets the bulk drain's cards and time as
     one finished batch: the seconds per card a running catalogue would already hold. From each
     run's event log: the per-run fixed cost (dequeued -> RUN_START -> first STEP_START, between the
     steps, last STEP_SUCCESS -> RUN_SUCCESS) and cards/s per run worker (cards over the time the
     runs held the slot), against the bulk tool's cards/s. A run's start, launch (RUN_STARTING) to
     its first STEP_START, is set against a bare ``python -c "import dagster"`` timed in the same
     run (target: at most twice it), with ``python -c "import stage_e_dagster.definitions"`` beside
     it: what a run worker loads.
  2. sensors: ``bench/sensor_history.py``'s whole-round tick (every sensor once) on PostgreSQL
     instances with 1,000 runs and 1,000 dynamic partitions against 100,000 and 50,000.
  3. retention: a PostgreSQL instance and catalogue holding many finished batches spread over
     ``--retention-spread-days``, each with its partition; the real ``retention_sensor`` ticks,
     its delete requests applied as the sensor daemon applies them, until nothing is left to
     prune. The partition count after, against the batches that finished within
     ``STAGE_E_RETENTION_DAYS``.

The sensor and retention parts raise the envelope's bars out of reach: they time ticks, not the
envelope. Prints the machine's load average at each part's start and end, then the summary lines.

Usage:
  python bench/scale.py                        # 800 cards, 100k runs + 50k partitions, 2k batches for retention
  python bench/scale.py --parts sensors        # one part only (dispatch, sensors, retention)
  python bench/scale.py --smoke                # about a minute
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    DeleteDynamicPartitionsRequest,
    RunsFilter,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import BIN, median, pg_database, seed_template, short_count, streaming_environment  # noqa: E402
from sensor_history import CHUNK, _context, pg_instance  # noqa: E402
from sensor_history import bench as history_bench  # noqa: E402
from streaming_vs_bulk import BulkDrain, Side, drain_with_bulk, drain_with_daemon  # noqa: E402

from stage_e_dagster.catalog.base import utcnow  # noqa: E402
from stage_e_dagster.catalog.engine import engine_for, session_scope  # noqa: E402
from stage_e_dagster.catalog.migrate import upgrade  # noqa: E402
from stage_e_dagster.catalog.models import MicroBatch  # noqa: E402
from stage_e_dagster.definitions import defs  # noqa: E402
from stage_e_dagster.defs.partitions import micro_batches  # noqa: E402
from stage_e_dagster.defs.resources import StageEResource  # noqa: E402
from stage_e_dagster.settings import load_settings  # noqa: E402

PARTS = ("dispatch", "sensors", "retention")
RUN_EVENTS = {DagsterEventType.RUN_STARTING, DagsterEventType.RUN_START, DagsterEventType.STEP_START,
              DagsterEventType.STEP_SUCCESS, DagsterEventType.RUN_SUCCESS}
# Two dispatch runs of two cards at this machine's bulk rate; one retention tick of each kind; each import
# timed once (a fresh interpreter is 1-3 s, and ten of them were a fifth of the smoke run).
SMOKE = {"cards": 4, "batch_target_s": 6.0, "runs": "100,1000", "partitions": "100,1000", "reps": 2, "warmup": 1,
         "retention_partitions": 100, "import_reps": 1}


def load_line(label: str) -> str:
    one, five, fifteen = os.getloadavg()
    line = f"[load] {label}: {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {len(os.sched_getaffinity(0))} cores"
    print(line, flush=True)
    return line


# --- part 1: per-run fixed cost and cards/s per run worker --------------------------------------


@dataclass(frozen=True)
class RunPhases:
    """One dispatch run's timeline from its event log (unix seconds) and the cards its batch held."""

    cards: int
    created: float
    dequeued: float  # RUN_STARTING: the queue took it and the launcher starts the worker
    started: float  # RUN_START: the worker process is up and the code location loaded
    first_step: float  # the first STEP_START: user code begins
    steps_s: float  # STEP_START -> STEP_SUCCESS, summed over the steps
    last_step_end: float
    succeeded: float  # RUN_SUCCESS

    @property
    def held_s(self) -> float:
        """How long the run held its dispatch slot (dequeued to success)."""
        return self.succeeded - self.dequeued

    @property
    def fixed_s(self) -> float:
        return self.held_s - self.steps_s

    @property
    def between_s(self) -> float:
        return (self.last_step_end - self.first_step) - self.steps_s


@dataclass(frozen=True)
class DispatchFigures:
    bulk: BulkDrain
    runs: list[RunPhases]
    drain_wall_s: float
    drain_from_first_run_s: float

    @property
    def bulk_rate(self) -> float:
        return self.bulk.cards / self.bulk.wall_s

    @property
    def worker_rate(self) -> float:
        return sum(r.cards for r in self.runs) / sum(r.held_s for r in self.runs)


def prime_sizing(url: str, bulk: BulkDrain) -> None:
    """Record the bulk drain as one finished batch, so the first work-sized batches use this machine's
    seconds per card instead of the sizing's default (``dispatch/sizing.py`` reads finished batches)."""
    now = utcnow()
    with session_scope(engine_for(url)) as session:
        session.add(MicroBatch(batch_key=f"mb-{now:%Y%m%dT%H%M%S}-bulkrate", card_ids=list(range(1, bulk.cards + 1)),
                               trigger_reason="bench-bulk-rate", attempt=1, status="succeeded",
                               started_at=now - timedelta(seconds=bulk.wall_s), finished_at=now))
    engine_for(url).dispose()


def run_phases(home: Path, url: str) -> list[RunPhases]:
    """Every dispatch run of the drain, from the instance's event log; each must have succeeded."""
    instance = DagsterInstance.from_config(str(home))
    records = sorted(instance.get_run_records(RunsFilter(tags={"stage_e/dispatch": "micro-batch"})),
                     key=lambda r: r.create_timestamp)
    engine = engine_for(url)
    with engine.connect() as conn:
        cards_by_run = {run_id: len(ids) for run_id, ids in conn.execute(
            sa.select(MicroBatch.run_id, MicroBatch.card_ids).where(MicroBatch.run_id.is_not(None)))}
    engine.dispose()
    phases = []
    for record in records:
        run_id = record.dagster_run.run_id
        if record.dagster_run.status != DagsterRunStatus.SUCCESS:
            raise SystemExit(f"dispatch run {run_id} ended {record.dagster_run.status.value}")
        events = list(instance.all_logs(run_id, of_type=RUN_EVENTS))
        first = {}
        for event in events:
            first.setdefault(event.dagster_event_type, event.timestamp)
        step_start = {e.step_key: e.timestamp for e in events if e.dagster_event_type == DagsterEventType.STEP_START}
        step_end = {e.step_key: e.timestamp for e in events if e.dagster_event_type == DagsterEventType.STEP_SUCCESS}
        phases.append(RunPhases(
            cards=cards_by_run[run_id],
            created=record.create_timestamp.timestamp(),
            dequeued=first[DagsterEventType.RUN_STARTING],
            started=first[DagsterEventType.RUN_START],
            first_step=min(step_start.values()),
            steps_s=sum(step_end[k] - step_start[k] for k in step_end),
            last_step_end=max(step_end.values()),
            succeeded=first[DagsterEventType.RUN_SUCCESS],
        ))
    instance.dispose()
    return phases


def dispatch_part(args: argparse.Namespace, folder: Path) -> DispatchFigures:
    template, corpus = seed_template(folder, args.cards, args.seed)
    os.environ.update({
        "STAGE_E_STREAMING_ENABLED": "true",
        "STAGE_E_IMAGE_ROOTS": str(corpus),
        "STAGE_E_FETCH_FAILURE_RATE_CEILING": "1",  # the corpus's broken images are on purpose
        "STAGE_E_MAX_CONCURRENT_DISPATCHES": "1",
    })
    if args.batch_target_s is not None:
        os.environ["STAGE_E_BATCH_TARGET_S"] = str(args.batch_target_s)
    timeout_s = max(600.0, 5.0 * args.cards)
    print(f"dispatch: bulk --workers 1 draining {args.cards} cards", flush=True)
    bulk = drain_with_bulk(Side.fresh(template, folder, "bulk"), 1, timeout_s)
    print(f"  {bulk.cards} cards in {bulk.wall_s:.1f} s", flush=True)
    stream = Side.fresh(template, folder, "stream")
    prime_sizing(stream.url, bulk)
    print(f"dispatch: dagster-daemon, 1 dispatch slot, work-sized batches "
          f"(STAGE_E_BATCH_TARGET_S={load_settings().batch_target_s:g})", flush=True)
    drain = drain_with_daemon(stream, folder, timeout_s, [], 0.0)
    figures = DispatchFigures(bulk, run_phases(stream.home, stream.url), drain.wall_s, drain.from_first_run_s)
    for key in ("STAGE_E_BATCH_TARGET_S", "STAGE_E_IMAGE_ROOTS", "STAGE_E_MAX_CONCURRENT_DISPATCHES"):
        os.environ.pop(key, None)
    return figures


def import_seconds(module: str, reps: int = 5) -> float:
    """The median wall time of a fresh ``python -c "import MODULE"`` with the project's interpreter."""
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        subprocess.run([str(BIN / "python"), "-c", f"import {module}"], check=True, timeout=120)
        times.append(time.perf_counter() - started)
    return median(times)


def report_dispatch(f: DispatchFigures, import_reps: int = 5) -> list[str]:
    runs = f.runs
    for i, r in enumerate(runs, start=1):
        print(f"  run {i:2d}: {r.cards:4d} cards  created->dequeued {r.dequeued - r.created:6.2f} s  "
              f"launch {r.started - r.dequeued:5.2f} s  to first step {r.first_step - r.started:5.2f} s  "
              f"steps {r.steps_s:7.2f} s  between {r.between_s:5.2f} s  finish {r.succeeded - r.last_step_end:5.2f} s")
    cards = sum(r.cards for r in runs)
    steps_rate = cards / sum(r.steps_s for r in runs)
    print(f"[dispatch] bulk --workers 1: {f.bulk.cards} cards in {f.bulk.wall_s:.1f} s ({f.bulk_rate:.3f} cards/s, "
          f"{1000 / f.bulk_rate:.0f} ms per card)")
    print(f"[dispatch] daemon, 1 slot: {cards} cards in {len(runs)} runs; {f.drain_wall_s:.1f} s from daemon start "
          f"({cards / f.drain_wall_s:.3f} cards/s), {f.drain_from_first_run_s:.1f} s from the first run's start")
    print(f"[dispatch] inside the steps: {steps_rate:.3f} cards/s ({1000 / steps_rate:.0f} ms per card)")
    fixed = [r.fixed_s for r in runs]
    launch = median([r.started - r.dequeued for r in runs])
    to_first_step = median([r.first_step - r.dequeued for r in runs])
    bare, location = import_seconds("dagster", import_reps), import_seconds("stage_e_dagster.definitions", import_reps)
    lines = [
        f"ratio cards/s per run worker / bulk --workers 1: {f.worker_rate / f.bulk_rate:.3f}   "
        f"({f.worker_rate:.3f} vs {f.bulk_rate:.3f} cards/s; batch median {median([r.cards for r in runs]):g} cards, "
        f"{len(runs)} runs)",
        f"per-run fixed cost: median {median(fixed):.2f} s  (launch {launch:.2f}"
        f", to first step {median([r.first_step - r.started for r in runs]):.2f}"
        f", between steps {median([r.between_s for r in runs]):.2f}"
        f", finish {median([r.succeeded - r.last_step_end for r in runs]):.2f}); "
        f"created -> first user code median {median([r.first_step - r.created for r in runs]):.2f} s",
        f"ratio launch (RUN_STARTING) -> first step / bare python -c 'import dagster': "
        f"{to_first_step / bare:.2f}   (target <= 2; {to_first_step:.2f} s vs {bare:.2f} s; "
        f"python -c 'import stage_e_dagster.definitions' {location:.2f} s)",
    ]
    return lines


# --- part 2: sensor ticks against run history and partition count -------------------------------


def sensors_part(args: argparse.Namespace, folder: Path) -> list[str]:
    runs = sorted(int(s) for s in args.runs.split(","))
    partitions = sorted(int(p) for p in args.partitions.split(","))
    streaming_environment(folder / "state", database_url="sqlite:///unused.sqlite", batch_size=25)
    options = argparse.Namespace(sensors="", reps=args.reps, warmup=args.warmup, in_flight=1, top=2)
    ratio = history_bench("postgres", lambda: pg_database("stage_e_bench_history"), pg_instance, runs, options,
                          partitions)
    return [f"ratio sensor round, {short_count(runs[-1])} runs + {short_count(partitions[-1])} partitions / "
            f"{short_count(runs[0])} runs + {short_count(partitions[0])} partitions: median {ratio:.2f}   "
            f"(target <= 1.5)"]


# --- part 3: the partition count under retention -----------------------------------------------


def apply_partition_requests(instance: DagsterInstance, requests: list[object]) -> int:
    """Delete requested partitions the way the sensor daemon does (a membership check, then a delete,
    per key: ``dagster/_daemon/sensor.py``); returns partitions deleted."""
    deleted = 0
    for request in requests:
        if not isinstance(request, DeleteDynamicPartitionsRequest):
            raise SystemExit(f"retention requested something other than a delete: {request}")
        for key in request.partition_keys:
            if instance.has_dynamic_partition(request.partitions_def_name, key):
                instance.delete_dynamic_partition(request.partitions_def_name, key)
                deleted += 1
    return deleted


def count_partitions(instance: DagsterInstance) -> int:
    return len(instance.get_dynamic_partitions(micro_batches.name))


def count_batches(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(MicroBatch)).scalar_one()


def retention_part(args: argparse.Namespace, folder: Path) -> list[str]:
    streaming_environment(folder / "state", database_url="sqlite:///unused.sqlite")
    days = load_settings().retention_days
    total, spread = args.retention_partitions, args.retention_spread_days
    sensor = defs.resolve_sensor_def("retention_sensor")
    with pg_database("stage_e_bench_retention") as url, pg_instance() as instance:
        engine = engine_for(url)
        upgrade(engine)
        started = time.perf_counter()
        now = utcnow()
        # Evenly spread over the last ``spread`` days: the oldest first, one every spread/total days.
        finished = [now - timedelta(days=spread * (total - i - 0.5) / total) for i in range(total)]
        keys = [f"mb-{at:%Y%m%dT%H%M%S}-{i:08x}" for i, at in enumerate(finished)]
        rows = [{"batch_key": key, "card_ids": [i + 1], "trigger_reason": "card-created", "attempt": 1,
                 "status": "succeeded", "created_at": at - timedelta(seconds=30),
                 "started_at": at - timedelta(seconds=20), "finished_at": at, "request_count": 1}
                for i, (key, at) in enumerate(zip(keys, finished))]
        with engine.begin() as conn:
            for start in range(0, total, CHUNK):
                conn.execute(sa.insert(MicroBatch), rows[start : start + CHUNK])
        for start in range(0, total, CHUNK):
            instance.add_dynamic_partitions(micro_batches.name, keys[start : start + CHUNK])
        before = count_partitions(instance)
        print(f"retention: {total:,} finished batches over {spread:g} days, {before:,} partitions, built in "
              f"{time.perf_counter() - started:.1f} s; STAGE_E_RETENTION_DAYS={days}", flush=True)
        resource = StageEResource(database_url=url)
        cursor: str | None = None
        tick_ms: list[float] = []
        apply_ms: list[float] = []
        requested: list[int] = []
        deleted_total, idle_ticks = 0, 0
        # Two ticks per 500 batches (the partition, then the row), and two idle ones to be sure.
        for _ in range(4 * (total // 500 + 2)):
            rows_before = count_batches(engine)
            context = _context(instance, cursor, resource)
            t0 = time.perf_counter()
            data = sensor.evaluate_tick(context)
            tick_ms.append((time.perf_counter() - t0) * 1000)
            cursor = data.cursor
            t0 = time.perf_counter()
            requests = list(data.dynamic_partitions_requests or [])
            requested.append(sum(len(r.partition_keys) for r in requests))
            deleted = apply_partition_requests(instance, requests)
            apply_ms.append((time.perf_counter() - t0) * 1000)
            deleted_total += deleted
            idle_ticks = idle_ticks + 1 if not deleted and count_batches(engine) == rows_before else 0
            if idle_ticks == 2:
                break
        else:
            raise SystemExit("retention: still pruning after the ticks it should need")
        cutoff = utcnow() - timedelta(days=days)
        within = sum(1 for at in finished if at >= cutoff)
        after, rows_left = count_partitions(instance), count_batches(engine)
        engine.dispose()
    busy = [(t, a, n) for t, a, n in zip(tick_ms, apply_ms, requested) if n]
    print(f"[retention] {len(tick_ms)} ticks until nothing was left to prune: median {median(tick_ms):.0f} ms, "
          f"max {max(tick_ms):.0f} ms per tick; {deleted_total:,} partitions deleted")
    if busy:
        per_key = sum(a for _, a, _ in busy) / sum(n for _, _, n in busy)
        busy_ms, busy_apply_ms = median([t for t, _, _ in busy]), median([a for _, a, _ in busy])
        print(f"[retention] the {len(busy)} ticks that requested deletions: median {busy_ms:.0f} ms per tick, then "
              f"{busy_apply_ms:.0f} ms applying them as the daemon does "
              f"({per_key:.1f} ms per partition)")
    print(f"[retention] after: {after:,} partitions, {rows_left:,} batch rows; finished within {days} days by the "
          f"layout: {within:,} (of {total:,} built)")
    return [f"ratio partitions after retention / batches finished within {days} days: {after / within:.3f}   "
            f"(target 1.00; {after:,} of {total:,} built, spread over {spread:g} days)"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--cards", type=int, default=800, help="cards each dispatch side drains")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--batch-target-s", type=float, help="STAGE_E_BATCH_TARGET_S (default: the setting's)")
    parser.add_argument("--runs", default="1000,100000", help="the two run-history sizes of the sensor part")
    parser.add_argument("--partitions", default="1000,50000", help="the dynamic partition counts beside them")
    parser.add_argument("--reps", type=int, default=10, help="timed sensor rounds")
    parser.add_argument("--warmup", type=int, default=2, help="untimed sensor rounds first")
    parser.add_argument("--retention-partitions", type=int, default=2_000, help="finished batches for retention")
    parser.add_argument("--retention-spread-days", type=float, default=28.0, help="how far back they finished")
    parser.add_argument("--import-reps", type=int, default=5, help="fresh interpreters timed per import")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, about a minute")
    parser.add_argument("--keep", type=Path, help="keep the work folder here instead of a temporary one")
    args = parser.parse_args()
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    parts = [p for p in args.parts.split(",") if p]
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")

    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="stage-e-scale-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        loads = [load_line("start")]
        if "dispatch" in parts:
            figures = dispatch_part(args, folder)
            loads.append(load_line("after dispatch"))
            summary += report_dispatch(figures, args.import_reps)
        if "sensors" in parts:
            summary += sensors_part(args, folder)
            loads.append(load_line("after sensors"))
        if "retention" in parts:
            summary += retention_part(args, folder)
            loads.append(load_line("after retention"))
    print()
    for line in loads + summary:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
