"""Cards per second through real Dagster runs of ``stage_e_dispatch`` against a plain Python loop.

One synthetic corpus is seeded once (``seed_corpus``: rendered images, the real PP-OCR reader in Stage C);
every arm gets a fresh copy of that catalogue, so each processes exactly the same cards from the
same starting state. For each batch size (default 25, the setting's default, and 100):

  * dagster: ``card_created_sensor`` ticks on a real instance (a temporary ``DAGSTER_HOME``) and
    each requested micro-batch runs with ``execute_in_process`` (what the run worker executes);
  * plain:   the same batches, card for card, through ``run_stage_c`` + ``run_stage_d`` in a loop;
  * launched (the first ``--launched`` batches, own catalogue copy): the same batches as a fresh
    ``dagster job execute`` process each, which is what a launched run pays on top: Python start,
    imports, loading the code location, a cold name index;
  * daemon (``--daemon``): a fresh catalogue copy drained by a real ``dagster-daemon`` on the
    project's workspace and ``dagster.yaml``: sensor ticks every few seconds, the run queue, runs
    launched as processes by the default run launcher. ``--daemon-concurrency`` (default 1, so it
    compares with the serial plain loop) sets ``STAGE_E_MAX_CONCURRENT_DISPATCHES``.

The dagster and plain runs of a batch are timed back to back (order alternating) so drifting load
on a shared machine hits both. Per-run fixed overhead = run wall time minus the plain loop's time
for the same batch. The framework share of it (run wall minus the two steps' own durations, from
the run's event log, split by phase) is printed too: it is far less noisy than a difference of
two OCR runs.

In-process execution leaves out the run worker's process start (the launched arm measures it)
and the daemon's tick interval, queue and launch latency (the daemon arm measures them).

Usage:
  python bench/end_to_end.py                         # 200 cards, batches of 25 and 100
  python bench/end_to_end.py --daemon                # also through a real dagster-daemon
  python bench/end_to_end.py --cards 6 --sizes 2,3   # smoke size, under a minute
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter, SensorResult, build_sensor_context

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import (  # noqa: E402
    PROJECT_ROOT,
    backlog,
    child_environment,
    fresh_copy,
    median,
    plain_engine,
    running_daemon,
    seed_template,
    streaming_environment,
)

from stage_e_dagster.catalog.base import utcnow  # noqa: E402
from stage_e_dagster.catalog.engine import engine_for, session_scope  # noqa: E402
from stage_e_dagster.catalog.models import Card, MicroBatch  # noqa: E402
from stage_e_dagster.definitions import defs  # noqa: E402
from stage_e_dagster.defs.dagster_internals import runs as dagster_runs  # noqa: E402
from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML  # noqa: E402
from stage_e_dagster.defs.partitions import micro_batches  # noqa: E402
from stage_e_dagster.defs.resources import StageEResource  # noqa: E402
from stage_e_dagster.defs.run_ends import runs_in_progress  # noqa: E402
from stage_e_dagster.dispatch.batches import record_batch  # noqa: E402
from stage_e_dagster.settings import load_settings  # noqa: E402
from stage_e_dagster.stage_c.fetch import ImageFetcher  # noqa: E402
from stage_e_dagster.stage_c.run import run_stage_c  # noqa: E402
from stage_e_dagster.stage_d.run import run_stage_d  # noqa: E402

DAGSTER_CLI = Path(sys.executable).with_name("dagster")
# The run's events still go to the instance's event log; only the console echo of them is dropped.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
PHASES = ("create", "start", "between", "finish", "return")  # see framework_phases


@dataclass
class BatchTiming:
    card_ids: list[int]
    dagster_s: float
    plain_s: float
    framework_s: float
    tick_s: float
    phases: dict[str, float]
    launched_s: float | None = None


@dataclass
class SizeResult:
    batch_size: int
    batches: list[BatchTiming] = field(default_factory=list)

    @property
    def cards(self) -> int:
        return sum(len(b.card_ids) for b in self.batches)


def make_instance(home: Path) -> DagsterInstance:
    """A real on-disk instance (SQLite storage) that a ``dagster job execute`` child can open too."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EMBEDDED_INSTANCE_YAML, home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return DagsterInstance.get()


def plain_batch(url: str, card_ids: list[int], run_id: str) -> float:
    """Stage C then Stage D over the batch, as a plain loop would call them."""
    engine = engine_for(url)
    settings = load_settings()
    started = time.perf_counter()
    fetcher = ImageFetcher.from_settings(settings, engine)
    try:
        run_stage_c(engine, card_ids, writer=f"plain:{run_id}", run_id=run_id, fetcher=fetcher)
    finally:
        fetcher.close()
    run_stage_d(engine, card_ids, run_id=run_id)
    return time.perf_counter() - started


def dagster_batch(instance: DagsterInstance, url: str, partition_key: str,
                  tags: dict[str, str]) -> tuple[float, float, dict[str, float]]:
    """Execute the dispatch job for one partition in process.

    Returns the run's wall time, the framework time outside its two steps, and that time by phase.
    """
    os.environ["STAGE_E_DATABASE_URL"] = url  # the job's resource reads it through EnvVar at launch
    job = defs.resolve_job_def("stage_e_dispatch")
    called = time.time()
    result = job.execute_in_process(partition_key=partition_key, instance=instance, tags=tags, raise_on_error=False,
                                    run_config=QUIET_CONSOLE)
    returned = time.time()
    if not result.success:
        failures = [e.message for e in result.all_events if e.is_failure]
        raise SystemExit(f"dispatch run for {partition_key} failed: {failures}")
    phases = framework_phases(instance, result.run_id, called, returned)
    return returned - called, sum(phases.values()), phases


def framework_phases(instance: DagsterInstance, run_id: str, called: float, returned: float) -> dict[str, float]:
    """Where the run's time outside its steps goes, from the event log's timestamps.

    create: call to RUN_START (run record, snapshots); start: RUN_START to the first step (resources,
    log capture); between: one step's success to the next step's start; finish: last step to
    RUN_SUCCESS; return: RUN_SUCCESS to the call returning.
    """
    kinds = {DagsterEventType.RUN_START, DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS,
             DagsterEventType.RUN_SUCCESS}
    events = [(e.timestamp, e.dagster_event.event_type) for e in instance.all_logs(run_id, of_type=kinds)]
    run_start = min(ts for ts, k in events if k == DagsterEventType.RUN_START)
    run_end = min(ts for ts, k in events if k == DagsterEventType.RUN_SUCCESS)
    starts = sorted(ts for ts, k in events if k == DagsterEventType.STEP_START)
    successes = sorted(ts for ts, k in events if k == DagsterEventType.STEP_SUCCESS)
    return {
        "create": run_start - called,
        "start": starts[0] - run_start,
        "between": sum(nxt - done for done, nxt in zip(successes, starts[1:])),
        "finish": run_end - successes[-1],
        "return": returned - run_end,
    }


def launched_batch(instance: DagsterInstance, url: str, card_ids: list[int], home: Path) -> float:
    """Record the batch in its own catalogue copy and run it in a fresh ``dagster job execute`` process."""
    settings = load_settings()
    with session_scope(engine_for(url)) as session:
        batch = record_batch(session, card_ids, trigger_reason="bench-launched", now=utcnow(),
                             claim_ttl_s=settings.claim_ttl_s)
        assert batch is not None
        key = batch.batch_key
    instance.add_dynamic_partitions(micro_batches.name, [key])
    env = {**os.environ, "DAGSTER_HOME": str(home), "STAGE_E_DATABASE_URL": url}
    command = [str(DAGSTER_CLI), "job", "execute", "-m", "stage_e_dagster.definitions", "-a", "defs",
               "-j", "stage_e_dispatch", "--tags", json.dumps({"dagster/partition": key})]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    runs = dagster_runs(instance, RunsFilter(tags={"dagster/partition": key}))
    if done.returncode != 0 or not runs or runs[0].status != DagsterRunStatus.SUCCESS:
        raise SystemExit(f"launched run for {key} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def warm_up(template: Path, folder: Path, instance: DagsterInstance) -> None:
    """One tiny batch through each path first: imports, the OCR model's first load, the name index."""
    os.environ["STAGE_E_MICRO_BATCH_SIZE"] = "2"
    url = fresh_copy(template, folder, "warmup")
    plain_batch(url, [1, 2], run_id="warmup-plain")
    result = tick(instance, url, cursor=None)
    request = result.run_requests[0]
    dagster_batch(instance, url, request.partition_key, dict(request.tags))
    engine_for(url).dispose()


def tick(instance: DagsterInstance, url: str, cursor: str | None) -> SensorResult:
    """One evaluation of the real sensor; its partitions are added as the daemon would add them."""
    sensor = defs.resolve_sensor_def("card_created_sensor")
    context = build_sensor_context(instance=instance, cursor=cursor,
                                   resources={"stage_e": StageEResource(database_url=url)}, definitions=defs)
    result = sensor(context)
    if isinstance(result, SensorResult):
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(micro_batches.name, list(request.partition_keys))
        return result
    return SensorResult(skip_reason=result)


def run_size(template: Path, folder: Path, instance: DagsterInstance, home: Path, batch_size: int,
             launched: int) -> SizeResult:
    os.environ["STAGE_E_MICRO_BATCH_SIZE"] = str(batch_size)
    dagster_url = fresh_copy(template, folder, f"dagster-{batch_size}")
    plain_url = fresh_copy(template, folder, f"plain-{batch_size}")
    launched_url = fresh_copy(template, folder, f"launched-{batch_size}")
    out = SizeResult(batch_size)
    cursor: str | None = None
    while True:
        started = time.perf_counter()
        result = tick(instance, dagster_url, cursor)
        tick_s = time.perf_counter() - started
        cursor = result.cursor or cursor
        if not result.run_requests:
            break
        for request in result.run_requests:
            with session_scope(engine_for(dagster_url)) as session:
                ids = list(session.get(MicroBatch, request.partition_key).card_ids)
            index = len(out.batches)
            if index % 2 == 0:
                dagster_s, framework_s, phases = dagster_batch(instance, dagster_url, request.partition_key,
                                                               dict(request.tags))
                plain_s = plain_batch(plain_url, ids, run_id=f"plain-{batch_size}-{index}")
            else:
                plain_s = plain_batch(plain_url, ids, run_id=f"plain-{batch_size}-{index}")
                dagster_s, framework_s, phases = dagster_batch(instance, dagster_url, request.partition_key,
                                                               dict(request.tags))
            timing = BatchTiming(ids, dagster_s, plain_s, framework_s, tick_s / len(result.run_requests), phases)
            if index < launched:
                timing.launched_s = launched_batch(instance, launched_url, ids, home)
            out.batches.append(timing)
            print(f"  batch {index + 1:3d}: {len(ids):4d} cards  dagster {dagster_s:7.2f} s  plain {plain_s:7.2f} s  "
                  f"framework {framework_s:5.2f} s" + (
                      f"  launched {timing.launched_s:7.2f} s"
                      if timing.launched_s is not None else ""), flush=True)
    check_all_processed(dagster_url, plain_url)
    for url in (dagster_url, plain_url, launched_url):
        engine_for(url).dispose()
    return out


def check_all_processed(*urls: str) -> None:
    for url in urls:
        reader = plain_engine(url)
        left, _ = backlog(reader)
        reader.dispose()
        if left:
            raise SystemExit(f"{left} cards still pending in {url}: the arms did not do the same work")


@dataclass
class DaemonResult:
    batch_size: int
    cards: int
    wall_s: float
    runs: int
    span_s: float
    run_s: list[float]
    launch_s: list[float]
    gap_s: list[float]
    overhead_s: list[float]


def daemon_arm(template: Path, folder: Path, batch_size: int, concurrency: int,
               plain_by_batch: dict[frozenset[int], float], timeout_s: float) -> DaemonResult:
    """The real thing: ``dagster-daemon`` on the project's workspace, runs launched as processes.

    Timed from the daemon's start until no card waits, no batch is in flight and no run is active
    (stopping the daemon earlier would interrupt a run worker still writing its last events).
    """
    url = fresh_copy(template, folder, f"daemon-{batch_size}")
    home = folder / f"dagster_home_daemon_{batch_size}"
    env = child_environment(home, STAGE_E_DATABASE_URL=url, STAGE_E_MICRO_BATCH_SIZE=str(batch_size),
                            STAGE_E_MAX_CONCURRENT_DISPATCHES=str(concurrency))
    engine = engine_for(url)
    reader = plain_engine(url)
    instance = DagsterInstance.from_config(str(home))
    log_path = folder / f"daemon-{batch_size}.log"
    started = time.perf_counter()
    with running_daemon(env, log_path) as daemon:
        while True:
            waiting, in_flight = backlog(reader)
            if waiting == 0 and in_flight == 0 and runs_in_progress(instance) == 0:
                break
            if daemon.poll() is not None or time.perf_counter() - started > timeout_s:
                raise SystemExit(f"daemon arm stuck ({waiting} cards waiting); log tail:\n"
                                 f"{log_path.read_text()[-3000:]}")
            time.sleep(0.25)
        wall = time.perf_counter() - started
    reader.dispose()
    records = sorted(instance.get_run_records(RunsFilter(tags={"stage_e/dispatch": "micro-batch"})),
                     key=lambda r: r.create_timestamp)
    with session_scope(engine) as session:
        ids_by_run = {b.run_id: frozenset(b.card_ids) for b in session.execute(sa.select(MicroBatch)).scalars()}
        cards = session.execute(sa.select(sa.func.count()).select_from(Card)).scalar_one()
    bad = [r.dagster_run.run_id for r in records if r.dagster_run.status != DagsterRunStatus.SUCCESS]
    if bad:
        failures = [e.message for run_id in bad for e in instance.all_logs(run_id)
                    if e.dagster_event is not None and e.dagster_event.is_failure]
        raise SystemExit(f"daemon runs did not succeed: {bad}: {failures[:3]}")
    created = [r.create_timestamp.timestamp() for r in records]
    result = DaemonResult(
        batch_size=batch_size, cards=cards, wall_s=wall, runs=len(records),
        span_s=max(r.end_time for r in records) - min(created),
        run_s=[r.end_time - r.start_time for r in records],
        launch_s=[r.start_time - c for r, c in zip(records, created)],
        gap_s=[c - prev.end_time for prev, c in zip(records, created[1:])],
        overhead_s=[r.end_time - r.start_time - plain_by_batch[ids_by_run[r.dagster_run.run_id]]
                    for r in records if ids_by_run.get(r.dagster_run.run_id) in plain_by_batch],
    )
    instance.dispose()
    engine.dispose()
    return result


def report(results: list[SizeResult], daemons: list[DaemonResult]) -> None:
    print()
    for r in results:
        dagster = sum(b.dagster_s + b.tick_s for b in r.batches)
        runs_only = sum(b.dagster_s for b in r.batches)
        plain = sum(b.plain_s for b in r.batches)
        overhead = [b.dagster_s - b.plain_s for b in r.batches]
        framework = [b.framework_s for b in r.batches]
        tag = f"[batch {r.batch_size}]"
        print(f"{tag} {r.cards} cards in {len(r.batches)} runs")
        print(f"{tag} dagster (ticks + in-process runs) {r.cards / dagster:6.3f} cards/s   "
              f"runs only {r.cards / runs_only:6.3f} cards/s   plain loop {r.cards / plain:6.3f} cards/s")
        print(f"{tag} ratio dagster/plain throughput: {plain / dagster:.3f}  (runs only {plain / runs_only:.3f})")
        print(f"{tag} per-run fixed overhead (run wall - plain, same batch): "
              f"mean {sum(overhead) / len(overhead):+.3f} s  "
              f"median {median(overhead):+.3f} s;  framework outside steps: median {median(framework):.3f} s;  "
              f"tick {sum(b.tick_s for b in r.batches) / len(r.batches):.3f} s per batch")
        print(f"{tag} framework outside steps by phase (median s): " + "  ".join(
            f"{phase} {median([b.phases[phase] for b in r.batches]):.3f}" for phase in PHASES))
        launched = [b for b in r.batches if b.launched_s is not None]
        if launched:
            extra = [b.launched_s - b.plain_s for b in launched]  # type: ignore[operator]
            print(f"{tag} launched run (fresh `dagster job execute` process): {len(launched)} runs, "
                  f"overhead vs plain median {median(extra):+.3f} s; ratio launched/plain time "
                  f"{sum(b.launched_s for b in launched) / sum(b.plain_s for b in launched):.3f}")  # type: ignore[misc]
    for r, d in zip(results, daemons):
        plain = sum(b.plain_s for b in r.batches)
        tag = f"[batch {d.batch_size}]"
        print(f"{tag} daemon: {d.cards} cards in {d.runs} launched runs, {d.wall_s:.1f} s from daemon start to idle "
              f"({d.cards / d.wall_s:.3f} cards/s), {d.span_s:.1f} s first run created to last run ended "
              f"({d.cards / d.span_s:.3f} cards/s)")
        print(f"{tag} ratio daemon/plain throughput: {plain / d.wall_s:.3f} from daemon start, "
              f"{plain / d.span_s:.3f} over the runs' span")
        print(f"{tag} daemon per run (median s): created->started {median(d.launch_s):.2f}  "
              f"started->ended {median(d.run_s):.2f}  ended->next created (negative: overlap) "
              f"{median(d.gap_s) if d.gap_s else 0:.2f}  "
              f"started->ended minus plain, same batch: {median(d.overhead_s) if d.overhead_s else float('nan'):+.2f} "
              f"({len(d.overhead_s)} matched)")
    if len(results) >= 2:
        a, b = results[0], results[-1]
        per_card = lambda r: sum(x.dagster_s - x.plain_s for x in r.batches) / r.cards  # noqa: E731
        print(f"ratio overhead per card, batch {b.batch_size} vs batch {a.batch_size}: "
              f"{per_card(b) * 1000:+.1f} / {per_card(a) * 1000:+.1f} ms per card")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=200, help="seeded cards (each arm processes all of them)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sizes", default="25,100", help="comma-separated micro-batch sizes")
    parser.add_argument("--launched", type=int, default=1,
                        help="batches per size also run as a fresh process (0: none)")
    parser.add_argument("--daemon", action="store_true", help="also run each size through a real dagster-daemon")
    parser.add_argument("--daemon-concurrency", type=int, default=1,
                        help="STAGE_E_MAX_CONCURRENT_DISPATCHES for the daemon arm (1: serial, like the plain loop)")
    parser.add_argument("--keep", type=Path, help="keep the work folder here instead of a temporary one")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="stage-e-e2e-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        template, corpus = seed_template(folder, args.cards, args.seed)
        streaming_environment(folder / "state", database_url="sqlite:///unused.sqlite", image_roots=corpus)
        home = folder / "dagster_home"
        instance = make_instance(home)
        warm_up(template, folder, instance)
        results = []
        for size in sizes:
            print(f"batch size {size}:", flush=True)
            results.append(run_size(template, folder, instance, home, size, args.launched))
        instance.dispose()
        daemons = []
        if args.daemon:
            for r in results:
                print(f"batch size {r.batch_size} through dagster-daemon:", flush=True)
                plain_by_batch = {frozenset(b.card_ids): b.plain_s for b in r.batches}
                daemons.append(daemon_arm(template, folder, r.batch_size, args.daemon_concurrency,
                                          plain_by_batch, timeout_s=max(600.0, 5.0 * args.cards)))
        report(results, daemons)
    return 0


if __name__ == "__main__":
    sys.exit(main())
