"""Cost of one tick of every sensor of the code location against a short and a long run history.

A Dagster instance keeps every run it ever made; a sensor that filters runs by a tag every
dispatch run carries, or reads run history without an indexed bound, gets slower every day. This
bench builds one instance per history size (``--runs``, default 1,000 and 100,000 finished
dispatch runs), each with the same small catalogue, and times a whole tick of every sensor in
``defs.sensors`` against each, the sizes interleaved round by round so machine load hits both alike.

History runs are written straight into the run storage tables (``runs``, ``run_tags``) in bulk,
with the columns and serialized run bodies ``add_run`` writes: one ``add_run`` per run would take
minutes at 100,000. Each is a finished run of ``stage_e_dispatch`` with the tags a dispatch run
carries (``dispatch_tags`` plus ``dagster/partition``, and ``dagster/sensor_name`` and
``dagster/run_key`` or ``dagster/backfill``), mostly SUCCESS with some FAILURE and CANCELED, one
run ending every ``HISTORY_SPACING_S`` seconds up to a few minutes ago, so the newest stretch of
history is the same at every size. The bench checks the instance reads them as runs (counts by
status and tag, and by update time) before timing anything.

The steady state timed: streaming on, no open trip, one batch in flight (recorded by a real
``card_created_sensor`` tick, its run STARTED in the instance), nothing else to dispatch. Every
sensor starts from the cursor it would hold after seeing the whole history (``caught_up_cursor``)
and then carries its own cursor from tick to tick, as the daemon does; ``--warmup`` untimed rounds
come first, and the bench says so if a cursor still moves after them.

Prints per sensor and size the median and p90 ms per tick and the ms of instance (run storage)
SQL in it, the slowest instance statements at the largest size, then per sensor
``ratio <sensor> 100k/1k`` (target <= 1.5: a tick's cost must not grow with run history), and
the same for all sensors' ticks of one round added up.

``--partitions`` gives each size that many ``micro_batches`` dynamic partitions as well (one count
per history size, in the same order), bulk-added before timing, so the ticks also face the
partition count a busy instance carries between retention passes.

Usage:
  python bench/sensor_history.py                         # SQLite instances, 1,000 and 100,000 runs
  python bench/sensor_history.py --postgres              # PostgreSQL instances and catalogues (127.0.0.1:5432)
  python bench/sensor_history.py --runs 100,1000 --reps 2   # smoke size, seconds
  python bench/sensor_history.py --postgres --partitions 1000,50000   # and 1k / 50k dynamic partitions
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    build_sensor_context,
    instance_for_test,
    serialize_value,
)

# Bench only: the run storage tables, for the bulk insert that stands in for 100,000 ``add_run`` calls.

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import median, percentile, pg_database, short_count, streaming_environment  # noqa: E402
from sensor_tick import build_catalogue  # noqa: E402

from stage_e_dagster.catalog.engine import engine_for  # noqa: E402
from stage_e_dagster.definitions import defs  # noqa: E402
from stage_e_dagster.defs import dagster_internals  # noqa: E402
from stage_e_dagster.defs.partitions import micro_batches  # noqa: E402
from stage_e_dagster.defs.resources import StageEResource  # noqa: E402
from stage_e_dagster.defs.tags import DISPATCH_TAG, PARTITION_TAG, dispatch_tags  # noqa: E402
from stage_e_dagster.settings import load_settings  # noqa: E402

INSTANCE_OVERRIDES = {"concurrency": {"pools": {"granularity": "run", "default_limit": 2}}}
JOB = "stage_e_dispatch"
BATCH_SIZE = 25
CATALOGUE_CARDS = 2000
HISTORY_SPACING_S = 20.0  # one dispatch run ends every 20 s: ~4,300 a day
HISTORY_ENDS_AGO_S = 300.0  # the newest history run ended five minutes ago
CHUNK = 5000
# Out of every 20 history runs: 18 succeeded, 1 failed, 1 was cancelled.
STATUS_CYCLE = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED] + [DagsterRunStatus.SUCCESS] * 18
# Out of every 10: 7 from card_created_sensor, 2 from evidence_changed_sensor, 1 from a sweep backfill.
TRIGGER_CYCLE = ["backstop-sweep"] + ["evidence-change"] * 2 + ["card-created"] * 7
ENDED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
SENSOR_OF_TRIGGER = {"card-created": "card_created_sensor", "evidence-change": "evidence_changed_sensor"}


@dataclass(frozen=True)
class History:
    runs: int
    failed: int
    newest_end: float  # unix time of the newest run end
    newest_hour: int  # runs that ended in the hour up to ``newest_end``


@dataclass
class Timings:
    ms: list[float] = field(default_factory=list)
    instance_sql_ms: list[float] = field(default_factory=list)
    statements: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def caught_up_cursor(sensor_name: str, history: History) -> str | None:
    """The cursor a sensor holds once it has seen the whole history; None: it starts without one.

    The envelope sensor's cursor is the newest run end it read (the keys its current and earlier
    cursor formats read). Teach this function a new sensor whose cursor follows run history.
    """
    if sensor_name == "envelope_trip_sensor":
        return json.dumps({"ts": history.newest_end, "ids": [], "seen": {}})
    return None


def _run_values(run: DagsterRun, ended_at: float, backfill_column: bool) -> dict[str, Any]:
    """The ``runs`` row ``add_run`` would write, with the timestamps the run's events would have set."""
    end = datetime.fromtimestamp(ended_at, tz=timezone.utc)
    values: dict[str, Any] = {
        "run_id": run.run_id,
        "pipeline_name": run.job_name,
        "status": run.status.value,
        "run_body": serialize_value(run),
        "snapshot_id": None,
        "partition": run.tags.get(PARTITION_TAG),
        "partition_set": None,
        "create_timestamp": end - timedelta(seconds=8),
        "update_timestamp": end,
        "start_time": ended_at - 6.0,
        "end_time": ended_at if run.status in ENDED else None,
    }
    if backfill_column:
        values["backfill_id"] = run.tags.get("dagster/backfill")
    return values


def insert_runs(instance: DagsterInstance, runs: list[tuple[DagsterRun, float]]) -> None:
    """Write runs into the run storage tables in bulk, as ``add_run`` plus their status events would."""
    backfill_column = dagster_internals.run_storage_has_backfill_column(instance)
    for start in range(0, len(runs), CHUNK):
        chunk = runs[start : start + CHUNK]
        rows = [_run_values(run, ended_at, backfill_column) for run, ended_at in chunk]
        tags = [{"run_id": run.run_id, "key": k, "value": v} for run, _ in chunk for k, v in run.tags.items()]
        dagster_internals.insert_run_rows(instance, rows, tags)
    dagster_internals.analyze_run_tables(instance)


def history_runs(count: int, now: float) -> list[tuple[DagsterRun, float]]:
    """``count`` finished dispatch runs, the newest ending ``HISTORY_ENDS_AGO_S`` before ``now``."""
    settings = load_settings()
    newest = now - HISTORY_ENDS_AGO_S
    runs = []
    for i in range(count):
        ended_at = newest - (count - 1 - i) * HISTORY_SPACING_S
        trigger = TRIGGER_CYCLE[i % len(TRIGGER_CYCLE)]
        status = STATUS_CYCLE[i % len(STATUS_CYCLE)]
        key = f"mb-{datetime.fromtimestamp(ended_at, tz=timezone.utc):%Y%m%dT%H%M%S}-{i:08x}"
        tags = {**dispatch_tags(settings, trigger_reason=trigger, attempt=1), PARTITION_TAG: key}
        if trigger in SENSOR_OF_TRIGGER:
            tags.update({"dagster/sensor_name": SENSOR_OF_TRIGGER[trigger], "dagster/run_key": key})
        else:
            tags["dagster/backfill"] = f"sweep{i // 1000:05d}"
        if status == DagsterRunStatus.FAILURE:
            tags["dagster/failure_reason"] = "STEP_FAILURE"
        runs.append((DagsterRun(job_name=JOB, run_id=str(uuid.uuid4()), tags=tags, status=status), ended_at))
    return runs


def build_history(instance: DagsterInstance, count: int) -> History:
    """Fill the instance with ``count`` finished dispatch runs and check it reads them back as runs."""
    started = time.perf_counter()
    runs = history_runs(count, time.time())
    insert_runs(instance, runs)
    failed = sum(1 for run, _ in runs if run.status == DagsterRunStatus.FAILURE)
    newest_end = max(ended_at for _, ended_at in runs)
    window_start = newest_end - 3600 + HISTORY_SPACING_S / 2  # between two run ends, never on one
    hour = datetime.fromtimestamp(window_start, tz=timezone.utc)
    history = History(
        runs=count,
        failed=failed,
        newest_end=newest_end,
        newest_hour=sum(1 for _, ended_at in runs if ended_at > window_start),
    )
    seen = {
        "runs": dagster_internals.runs_count(instance),
        "failed dispatch runs (status + tag)": dagster_internals.runs_count(
            instance, RunsFilter(statuses=[DagsterRunStatus.FAILURE], tags={DISPATCH_TAG: "micro-batch"})
        ),
        "ended in the newest hour (update time)": len(
            instance.get_run_records(RunsFilter(updated_after=hour), order_by="update_timestamp", ascending=True)
        ),
    }
    expected = {
        "runs": count,
        "failed dispatch runs (status + tag)": failed,
        "ended in the newest hour (update time)": history.newest_hour,
    }
    if seen != expected:
        raise SystemExit(f"the instance does not read the bulk-inserted runs as runs: {seen} != {expected}")
    print(f"  {count:,} past dispatch runs in {time.perf_counter() - started:.1f} s; the instance reads "
          + ", ".join(f"{v:,} {k}" for k, v in seen.items()), flush=True)
    return history


def build_partitions(instance: DagsterInstance, count: int) -> None:
    """Add ``count`` finished-looking ``micro_batches`` partitions (keys shaped as the sensor's) and
    check the instance counts them."""
    started = time.perf_counter()
    keys = [f"mb-20260101T000000-p{i:08x}" for i in range(count)]
    for start in range(0, count, CHUNK):
        instance.add_dynamic_partitions(micro_batches.name, keys[start : start + CHUNK])
    seen = len(instance.get_dynamic_partitions(micro_batches.name))
    if seen != count:
        raise SystemExit(f"the instance reads {seen} dynamic partitions, expected {count}")
    print(f"  {count:,} dynamic partitions in {time.perf_counter() - started:.1f} s", flush=True)


@contextmanager
def pg_instance() -> Iterator[DagsterInstance]:
    """A Dagster instance whose storage is a throwaway PostgreSQL database, dropped afterwards."""
    with pg_database("stage_e_bench_instance") as url:
        overrides = {**INSTANCE_OVERRIDES, "storage": {"postgres": {"postgres_url": url}}}
        with instance_for_test(overrides=overrides) as instance:
            yield instance


def start_in_flight_batch(instance: DagsterInstance, resource: StageEResource) -> int:
    """One real ``card_created_sensor`` tick records the pending batch(es); their runs go STARTED."""
    sensor = defs.resolve_sensor_def("card_created_sensor")
    context = _context(instance, None, resource)
    data = sensor.evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    now = time.time()
    runs = []
    for request in data.run_requests or []:
        tags = {**request.tags, PARTITION_TAG: request.partition_key, "dagster/sensor_name": sensor.name,
                "dagster/run_key": request.run_key}
        runs.append((DagsterRun(job_name=JOB, run_id=str(uuid.uuid4()), tags=tags,
                                status=DagsterRunStatus.STARTED), now))
    insert_runs(instance, runs)
    return len(runs)


def _context(instance: DagsterInstance, cursor: str | None, resource: StageEResource) -> SensorEvaluationContext:
    """A tick's context as the code server builds it: with ``instance_ref``, run requests' partition
    keys are checked against the instance (part of a tick's cost)."""
    return build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        cursor=cursor,
        resources={**(defs.resources or {}), "stage_e": resource},
        definitions=defs,
    )


class StatementTimer:
    """Wall time of every SQL statement any engine runs, kept for the instance's engines only."""

    def __init__(self, catalogue_urls: set[str]) -> None:
        self.catalogue_urls = catalogue_urls
        self.active = False
        self.instance_ms = 0.0
        self.statements: dict[str, float] = defaultdict(float)
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self._before)
        sa.event.listen(sa.engine.Engine, "after_cursor_execute", self._after)

    def _before(self, conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        conn.info["bench_t0"] = time.perf_counter()

    def _after(self, conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        started = conn.info.pop("bench_t0", None)
        if not self.active or started is None:
            return
        if conn.engine.url.render_as_string(hide_password=False) in self.catalogue_urls:
            return
        elapsed = (time.perf_counter() - started) * 1000
        self.instance_ms += elapsed
        self.statements[" ".join(statement.split())[:150]] += elapsed

    def start(self) -> None:
        self.instance_ms, self.statements, self.active = 0.0, defaultdict(float), True

    def stop(self) -> None:
        self.active = False

    def close(self) -> None:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", self._before)
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", self._after)


class Location:
    """One history size: its instance, its catalogue, each sensor's cursor and timings."""

    def __init__(self, instance: DagsterInstance, url: str, history: History, sensors: list[SensorDefinition]):
        self.instance = instance
        self.resource = StageEResource(database_url=url)
        self.history = history
        self.cursors = {s.name: caught_up_cursor(s.name, history) for s in sensors}
        self.timings: dict[str, Timings] = {s.name: Timings() for s in sensors}
        self.moving: set[str] = set()
        self.requested: dict[str, int] = defaultdict(int)

    def tick(self, sensor: SensorDefinition, timer: StatementTimer, *, keep: bool) -> float:
        context = _context(self.instance, self.cursors[sensor.name], self.resource)
        timer.start()
        started = time.perf_counter()
        data = sensor.evaluate_tick(context)
        elapsed = (time.perf_counter() - started) * 1000
        timer.stop()
        if data.cursor != self.cursors[sensor.name]:
            self.moving.add(sensor.name)
        self.cursors[sensor.name] = data.cursor
        if data.run_requests:
            self.requested[sensor.name] += len(data.run_requests)
        if keep:
            times = self.timings[sensor.name]
            times.ms.append(elapsed)
            times.instance_sql_ms.append(timer.instance_ms)
            for statement, ms in timer.statements.items():
                times.statements[statement].append(ms)
        return elapsed


def time_interleaved(locations: list[Location], sensors: list[SensorDefinition], timer: StatementTimer,
                     *, reps: int, warmup: int) -> list[list[float]]:
    """``warmup + reps`` rounds; each ticks every sensor once at every size. Returns each size's round totals."""
    totals: list[list[float]] = [[] for _ in locations]
    for rep in range(warmup + reps):
        keep = rep >= warmup
        if rep == warmup:
            for location in locations:
                location.moving.clear()
                location.requested.clear()
        # Odd rounds tick the sizes in reverse, so neither always goes first after another sensor.
        order = list(enumerate(locations))
        if rep % 2:
            order.reverse()
        round_ms = [0.0] * len(locations)
        for sensor in sensors:
            for i, location in order:
                round_ms[i] += location.tick(sensor, timer, keep=keep)
        if keep:
            for i, ms in enumerate(round_ms):
                totals[i].append(ms)
    return totals


def report(label: str, sensors: list[SensorDefinition], locations: list[Location], totals: list[list[float]],
           top: int) -> None:
    width = max(len(s.name) for s in sensors)
    for sensor in sensors:
        for location in locations:
            t = location.timings[sensor.name]
            print(f"[{label}] {sensor.name:{width}s} {short_count(location.history.runs):>5s} runs: "
                  f"median {median(t.ms):8.2f} ms   p90 {percentile(t.ms, 0.9):8.2f} ms   "
                  f"instance SQL {median(t.instance_sql_ms):8.2f} ms   ({len(t.ms)} ticks)")
        big = locations[-1].timings[sensor.name]
        ranked = sorted(big.statements.items(), key=lambda kv: -sum(kv[1]))[:top]
        for statement, values in ranked:
            print(f"      {sum(values) / len(big.ms):8.2f} ms/tick  {statement}")
    for location in locations:
        for name in sorted(location.moving):
            print(f"[{label}] note: {name}'s cursor still moved during the timed ticks at "
                  f"{short_count(location.history.runs)} runs (not a steady state; see caught_up_cursor)")
        for name, count in sorted(location.requested.items()):
            print(f"[{label}] note: {name} requested {count} run(s) during the timed ticks at "
                  f"{short_count(location.history.runs)} runs")
    small, big_loc = locations[0], locations[-1]
    a, b = short_count(small.history.runs), short_count(big_loc.history.runs)
    for sensor in sensors:
        x, y = small.timings[sensor.name], big_loc.timings[sensor.name]
        print(f"[{label}] ratio {sensor.name} {b}/{a}: median {median(y.ms) / median(x.ms):.2f}  "
              f"p90 {percentile(y.ms, 0.9) / percentile(x.ms, 0.9):.2f}   (target <= 1.5)")
    print(f"[{label}] ratio all sensors, one round, {b}/{a}: median {median(totals[-1]) / median(totals[0]):.2f}  "
          f"p90 {percentile(totals[-1], 0.9) / percentile(totals[0], 0.9):.2f}   "
          f"({median(totals[0]):.1f} -> {median(totals[-1]):.1f} ms per round)")


def bench(label: str, make_catalogue: Callable[[], Any], make_instance: Callable[[], Any], sizes: list[int],
          args: argparse.Namespace, partitions: list[int] | None = None) -> float:
    """Time every sensor at each history size (and partition count, if given) and print the report;
    returns the whole-round median ratio, largest size over smallest."""
    sensors = [defs.resolve_sensor_def(s.name) for s in defs.sensors]
    if args.sensors:
        sensors = [s for s in sensors if s.name in args.sensors.split(",")]
    print(f"[{label}] sensors: {', '.join(s.name for s in sensors)}", flush=True)
    with ExitStack() as stack:
        locations, urls = [], set()
        for i, runs in enumerate(sizes):
            url = stack.enter_context(make_catalogue())
            urls.add(url)
            build_catalogue(url, cards=CATALOGUE_CARDS, backlog=BATCH_SIZE * args.in_flight, newest=0)
            stack.callback(engine_for(url).dispose)
            instance = stack.enter_context(make_instance())
            history = build_history(instance, runs)
            if partitions:
                build_partitions(instance, partitions[i])
            location = Location(instance, url, history, sensors)
            started = start_in_flight_batch(instance, location.resource)
            if started != args.in_flight:
                raise SystemExit(f"the priming tick requested {started} batches, expected {args.in_flight}")
            locations.append(location)
        timer = StatementTimer(urls)
        stack.callback(timer.close)
        totals = time_interleaved(locations, sensors, timer, reps=args.reps, warmup=args.warmup)
        report(label, sensors, locations, totals, args.top)
    return median(totals[-1]) / median(totals[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="1000,100000", help="comma-separated history sizes (finished dispatch runs)")
    parser.add_argument("--reps", type=int, default=20, help="timed rounds (one tick of every sensor per size)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--in-flight", type=int, default=1, choices=(1, 2), help="batches with a STARTED run")
    parser.add_argument("--sensors", default="", help="comma-separated sensor names (default: every sensor)")
    parser.add_argument("--top", type=int, default=2, help="slowest instance statements to list per sensor")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL instances and catalogues")
    parser.add_argument("--partitions", default="",
                        help="comma-separated dynamic partition counts, one per history size (default: none)")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.runs.split(","))
    if len(sizes) < 2 or sizes[0] < 1:
        parser.error("need two or more history sizes, each at least 1")
    partitions = sorted(int(p) for p in args.partitions.split(",")) if args.partitions else None
    if partitions is not None and len(partitions) != len(sizes):
        parser.error("--partitions needs one count per history size")

    with tempfile.TemporaryDirectory(prefix="stage-e-bench-") as tmp:
        streaming_environment(Path(tmp), database_url=f"sqlite:///{Path(tmp) / 'unused.sqlite'}",
                              batch_size=BATCH_SIZE)
        if args.postgres:
            bench("postgres", lambda: pg_database("stage_e_bench_history"), pg_instance, sizes, args, partitions)
        else:
            counter = iter(range(len(sizes)))

            @contextmanager
            def sqlite_url() -> Iterator[str]:
                path = Path(tmp) / f"catalog-{next(counter)}.sqlite"
                yield f"sqlite:///{path}"
                path.unlink(missing_ok=True)

            bench("sqlite", sqlite_url, lambda: instance_for_test(overrides=INSTANCE_OVERRIDES), sizes, args,
                  partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
