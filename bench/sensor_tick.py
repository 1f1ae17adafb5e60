"""Cost of one ``card_created_sensor`` tick against a small and a large catalogue, and their ratio.

The tick is the real sensor function, evaluated with ``build_sensor_context`` on a real Dagster
instance (``instance_for_test``) against a real, migrated catalogue. Each catalogue is built with
set-based SQL (a recursive CTE on SQLite, ``generate_series`` on PostgreSQL): most cards already
processed, a backlog of pending cards spread evenly over the id range, a few new cards above the
sensor cursor, and a history of finished micro-batches and fetch outcomes in proportion to the size.

Two kinds of tick are timed at each size:
  * backlog: the tick records two batches (seeds above the cursor first, then the backlog by id);
    the batches and their claims are deleted between repetitions so every tick does the same work;
  * idle: the backlog is emptied first, so the tick finds nothing (the common tick of a quiet system).
And, on the same emptied catalogue with one batch running, a drain's end: the look for an idle slot
a running batch makes every ``dispatch.tail.CHECK_EVERY_S`` (``slot_idle`` without the write lock,
then ``slot_free`` under it, as a split asks before moving its tail; no split is made).

The sizes are ticked in turn (one tick each per round), so drifting load on a shared machine hits
them alike. Prints median and p90 ms per tick for each size and kind, the catalogue SQL time per
tick and the statements that took longest, and the ratio largest/smallest size for the whole tick
(target <= 1.5: selection must cost O(batch), not O(catalogue)) and for its catalogue SQL alone.

Usage:
  python bench/sensor_tick.py                      # SQLite, 10k and 1M cards
  python bench/sensor_tick.py --postgres           # PostgreSQL (a throwaway database on 127.0.0.1:5432)
  python bench/sensor_tick.py --explain            # also the plan of each tick's slowest cards query
  python bench/sensor_tick.py --sizes 200,2000 --backlog 20 --reps 3   # seconds, for a smoke test
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from dagster import DagsterInstance, SensorResult, build_sensor_context, instance_for_test

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import median, percentile, pg_database, short_count, streaming_environment  # noqa: E402

from stage_e_dagster.catalog.engine import engine_for, read_scope, session_scope  # noqa: E402
from stage_e_dagster.catalog.migrate import upgrade  # noqa: E402
from stage_e_dagster.definitions import defs  # noqa: E402
from stage_e_dagster.defs.resources import StageEResource  # noqa: E402
from stage_e_dagster.defs.tags import DISPATCH_POOL  # noqa: E402
from stage_e_dagster.dispatch import tail  # noqa: E402
from stage_e_dagster.settings import load_settings  # noqa: E402

INSTANCE_OVERRIDES = {"concurrency": {"pools": {"granularity": "run", "default_limit": 2}}}
BATCHES_PER_TICK = 2  # STAGE_E_MAX_CONCURRENT_DISPATCHES with nothing in flight

_SQLITE_CARDS = """
INSERT INTO cards (id, identifier, name, image_locator, content_hash, stage_c_pending, stage_d_pending,
                   evidence_writer)
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :cards)
SELECT n, 'bench-' || n, 'Bench Card ' || (n % 5000), 'file:///bench/images/' || n || '.jpg',
       CASE WHEN n > :cursor THEN NULL ELSE printf('%064x', n) END,
       CASE WHEN n > :cursor OR n % :stride = :offset THEN 1 ELSE 0 END, 0,
       CASE WHEN n > :cursor OR n % :stride = :offset THEN NULL ELSE 'dispatch:bench' END
FROM seq
"""

_PG_CARDS = """
INSERT INTO cards (id, identifier, name, image_locator, content_hash, stage_c_pending, stage_d_pending,
                   evidence_writer)
SELECT n, 'bench-' || n, 'Bench Card ' || (n % 5000), 'file:///bench/images/' || n || '.jpg',
       CASE WHEN n > :cursor THEN NULL ELSE lpad(to_hex(n), 64, '0') END,
       (n > :cursor OR n % :stride = :offset), false,
       CASE WHEN n > :cursor OR n % :stride = :offset THEN NULL ELSE 'dispatch:bench' END
FROM generate_series(1, :cards) AS n
"""

_SQLITE_HISTORY = """
INSERT INTO micro_batches (batch_key, card_ids, trigger_reason, attempt, status)
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :batches)
SELECT printf('mb-20260101T000000-%08x', n), '[' || (n * 25) || ']', 'card-created', 1, 'succeeded' FROM seq
"""

_PG_HISTORY = """
INSERT INTO micro_batches (batch_key, card_ids, trigger_reason, attempt, status)
SELECT 'mb-20260101T000000-' || lpad(to_hex(n), 8, '0'), json_build_array(n * 25), 'card-created', 1, 'succeeded'
FROM generate_series(1, :batches) AS n
"""

_SQLITE_OUTCOMES = """
INSERT INTO fetch_outcomes (outcome, status_code, host, card_id)
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :outcomes)
SELECT 'ok', 200, 'lh3.googleusercontent.com', n * 10 FROM seq
"""

_PG_OUTCOMES = """
INSERT INTO fetch_outcomes (outcome, status_code, host, card_id)
SELECT 'ok', 200, 'lh3.googleusercontent.com', n * 10 FROM generate_series(1, :outcomes) AS n
"""


@dataclass(frozen=True)
class Catalogue:
    url: str
    cards: int
    pending: int
    cursor: int


@dataclass
class TickTimes:
    ms: list[float] = field(default_factory=list)
    statements: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def build_catalogue(url: str, *, cards: int, backlog: int, newest: int) -> Catalogue:
    """Migrate and fill a catalogue: ``backlog`` pending cards spread over the ids, ``newest`` new ones on top."""
    engine = engine_for(url)
    upgrade(engine)
    postgres = engine.dialect.name == "postgresql"
    cursor = cards - newest
    stride = max(1, cursor // max(1, backlog))
    params = {"cards": cards, "cursor": cursor, "stride": stride, "offset": stride // 2}
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(sa.text(_PG_CARDS if postgres else _SQLITE_CARDS), params)
        conn.execute(sa.text(_PG_HISTORY if postgres else _SQLITE_HISTORY), {"batches": max(1, cards // 25)})
        conn.execute(sa.text(_PG_OUTCOMES if postgres else _SQLITE_OUTCOMES), {"outcomes": max(1, cards // 10)})
        if postgres:
            conn.execute(sa.text("SELECT setval(pg_get_serial_sequence('cards', 'id'), :n)"), {"n": cards})
    if postgres:  # a production database is analysed by autovacuum; a fresh bulk load is not yet
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))
    with engine.connect() as conn:
        pending = conn.execute(sa.text("SELECT count(*) FROM cards WHERE stage_c_pending")).scalar_one()
    print(f"  built {cards:,} cards ({pending:,} pending, cursor at id {cursor:,}), "
          f"{cards // 25:,} finished batches, {cards // 10:,} fetch outcomes in {time.perf_counter() - started:.1f} s",
          flush=True)
    return Catalogue(url=url, cards=cards, pending=pending, cursor=cursor)


def _statement_timer(engine: sa.Engine, sink: TickTimes, active: list[bool]):  # type: ignore[no-untyped-def]
    """Per-statement wall time, keyed by the statement's first 110 characters, while ``active[0]`` is set."""

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        conn.info["bench_t0"] = time.perf_counter()

    def after(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if active[0]:
            key = " ".join(statement.split())[:110]
            sink.statements[key].append((time.perf_counter() - conn.info.pop("bench_t0")) * 1000)

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)
    return before, after


def _undo(engine: sa.Engine, batch_keys: list[str]) -> None:
    """Delete the batches a tick recorded and their claims, so the next tick finds the same cards."""
    if not batch_keys:
        return
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM card_claims WHERE batch_key IN :keys").bindparams(
            sa.bindparam("keys", expanding=True)), {"keys": batch_keys})
        conn.execute(sa.text("DELETE FROM micro_batches WHERE batch_key IN :keys").bindparams(
            sa.bindparam("keys", expanding=True)), {"keys": batch_keys})


class Ticker:
    """The real sensor against one catalogue on its own instance, its catalogue statements timed."""

    def __init__(self, catalogue: Catalogue, instance: DagsterInstance) -> None:
        self.catalogue = catalogue
        self.instance = instance
        self.sensor = defs.resolve_sensor_def("card_created_sensor")
        self.resource = StageEResource(database_url=catalogue.url)
        self.engine = engine_for(catalogue.url)
        self.times = TickTimes()
        self._active = [False]
        self._listeners = _statement_timer(self.engine, self.times, self._active)

    def tick(self, *, expect_batches: int, keep: bool) -> None:
        """One evaluation of the sensor; the batches it records are deleted again afterwards."""
        context = build_sensor_context(
            instance=self.instance, cursor=str(self.catalogue.cursor), resources={"stage_e": self.resource},
            definitions=defs,
        )
        self._active[0] = keep
        started = time.perf_counter()
        result = self.sensor(context)
        elapsed = (time.perf_counter() - started) * 1000
        self._active[0] = False
        requests = result.run_requests if isinstance(result, SensorResult) else []
        keys = [r.partition_key for r in requests or []]
        if len(keys) != expect_batches:
            raise SystemExit(f"a tick requested {len(keys)} batches, expected {expect_batches}: {result}")
        _undo(self.engine, keys)
        if keep:
            self.times.ms.append(elapsed)

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._listeners[0])
        sa.event.remove(self.engine, "after_cursor_execute", self._listeners[1])


def time_interleaved(catalogues: list[Catalogue], *, expect_batches: int, reps: int, warmup: int) -> list[TickTimes]:
    """Tick every catalogue in turn, ``warmup + reps`` rounds, so drifting machine load hits all sizes alike."""
    with ExitStack() as stack:
        tickers = []
        for catalogue in catalogues:
            instance = stack.enter_context(instance_for_test(overrides=INSTANCE_OVERRIDES))
            ticker = Ticker(catalogue, instance)
            stack.callback(ticker.close)
            tickers.append(ticker)
        for rep in range(warmup + reps):
            for ticker in tickers:
                ticker.tick(expect_batches=expect_batches, keep=rep >= warmup)
        return [t.times for t in tickers]


def empty_backlog(url: str) -> int:
    with engine_for(url).begin() as conn:
        return conn.execute(sa.text("UPDATE cards SET stage_c_pending = false WHERE stage_c_pending")).rowcount


RUNNING_BATCH = "mb-20260101T000000-drainend"


def start_running_batch(url: str) -> None:
    """One batch running (a run draining its last cards) beside the free slot the probe looks for."""
    with engine_for(url).begin() as conn:
        conn.execute(sa.text("INSERT INTO micro_batches (batch_key, card_ids, trigger_reason, attempt, status, run_id) "
                             "VALUES (:key, '[1]', 'card-created', 1, 'running', 'bench-run')"), {"key": RUNNING_BATCH})


def time_drain_end(catalogues: list[Catalogue], *, reps: int, warmup: int) -> list[TickTimes]:
    """The idle-slot look of a run at its drain's end, at every size in turn: the read the run makes
    every CHECK_EVERY_S, then the re-read a split makes under the write lock."""
    settings = load_settings()
    times = [TickTimes() for _ in catalogues]
    engines = [engine_for(c.url) for c in catalogues]
    listeners = []
    actives = [[False] for _ in catalogues]
    for engine, sink, active in zip(engines, times, actives):
        listeners.append((engine, _statement_timer(engine, sink, active)))
    try:
        for rep in range(warmup + reps):
            for engine, sink, active in zip(engines, times, actives):
                active[0] = rep >= warmup
                started = time.perf_counter()
                with read_scope(engine) as session:
                    idle = tail.slot_idle(session, settings, pool=DISPATCH_POOL)
                with session_scope(engine) as session:
                    free = tail.slot_free(session, settings, pool=DISPATCH_POOL)
                elapsed = (time.perf_counter() - started) * 1000
                active[0] = False
                if not (idle and free):
                    raise SystemExit(f"the drain-end probe found no idle slot (idle {idle}, free {free})")
                if rep >= warmup:
                    sink.ms.append(elapsed)
    finally:
        for engine, (before, after) in listeners:
            sa.event.remove(engine, "before_cursor_execute", before)
            sa.event.remove(engine, "after_cursor_execute", after)
    return times


def print_plans(catalogue: Catalogue) -> None:
    """The plan of the slowest ``cards`` query one real tick runs, with that tick's own parameters."""
    engine = engine_for(catalogue.url)
    runs: list[tuple[float, str, object]] = []

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        conn.info["bench_plan_t0"] = time.perf_counter()

    def after(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().startswith("SELECT") and "FROM cards" in statement:
            runs.append((time.perf_counter() - conn.info.pop("bench_plan_t0"), statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)
    try:
        time_interleaved([catalogue], expect_batches=BATCHES_PER_TICK if catalogue.pending else 0, reps=1, warmup=0)
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)
        sa.event.remove(engine, "after_cursor_execute", after)
    if not runs:
        return
    elapsed, statement, parameters = max(runs, key=lambda r: r[0])
    postgres = engine.dialect.name == "postgresql"
    print(f"    plan of the slowest cards query of one tick ({elapsed * 1000:.2f} ms), parameters {parameters}:")
    prefix = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " if postgres else "EXPLAIN QUERY PLAN "
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(prefix + statement, parameters)
        for row in cur.fetchall():
            print(f"      {row[0] if postgres else row[-1]}")
        raw.rollback()
    finally:
        raw.close()


def _sql_ms(times: TickTimes) -> float:
    return sum(sum(v) for v in times.statements.values()) / len(times.ms)


def report(label: str, kind: str, catalogue: Catalogue, times: TickTimes, top: int) -> None:
    what = "probe" if kind == "drain end" else "tick"
    print(f"[{label}] {kind:7s} {what}, {short_count(catalogue.cards):>4s} cards: median {median(times.ms):8.2f} ms   "
          f"p90 {percentile(times.ms, 0.9):8.2f} ms   ({len(times.ms)} ticks)")
    sql_ms = _sql_ms(times)
    count = sum(len(v) for v in times.statements.values()) / len(times.ms)
    print(f"      {sql_ms:8.2f} ms/{what} in {count:.0f} catalogue statements; "
          "the rest is the Dagster instance and Python")
    ranked = sorted(times.statements.items(), key=lambda kv: -sum(kv[1]))[:top]
    for statement, values in ranked:
        per_tick = sum(values) / len(times.ms)
        print(f"      {per_tick:8.2f} ms/{what}  x{len(values) / len(times.ms):4.1f}  {statement}")


def bench(label: str, make_url, sizes: list[int], args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    with ExitStack() as stack:
        catalogues = []
        for cards in sizes:
            url = stack.enter_context(make_url())
            catalogues.append(build_catalogue(url, cards=cards, backlog=args.backlog, newest=args.newest))
            stack.callback(engine_for(url).dispose)
        idle = [Catalogue(url=c.url, cards=c.cards, pending=0, cursor=c.cards) for c in catalogues]
        results: dict[str, list[TickTimes]] = {}
        for kind, group, expect in (("backlog", catalogues, BATCHES_PER_TICK), ("idle", idle, 0)):
            if kind == "idle":
                emptied = [empty_backlog(c.url) for c in catalogues]
                print(f"  idle: cleared {', '.join(f'{n:,}' for n in emptied)} pending cards", flush=True)
            results[kind] = time_interleaved(group, expect_batches=expect, reps=args.reps, warmup=args.warmup)
            for catalogue, times in zip(group, results[kind]):
                report(label, kind, catalogue, times, args.top)
                if args.explain:
                    print_plans(catalogue)
        for catalogue in idle:
            start_running_batch(catalogue.url)
        results["drain end"] = time_drain_end(idle, reps=args.reps, warmup=args.warmup)
        for catalogue, times in zip(idle, results["drain end"]):
            report(label, "drain end", catalogue, times, args.top)
    for kind in ("backlog", "idle", "drain end"):
        a, b = results[kind][0], results[kind][-1]
        small, big = short_count(sizes[0]), short_count(sizes[-1])
        what = "probe" if kind == "drain end" else "tick"
        print(f"[{label}] ratio {kind} {what} {big}/{small}: "
              f"median {median(b.ms) / median(a.ms):.2f}  p90 {percentile(b.ms, 0.9) / percentile(a.ms, 0.9):.2f}"
              f"   (target <= 1.5)")
        print(f"[{label}] ratio {kind} {what}, catalogue SQL only, {big}/{small}: "
              f"{_sql_ms(b) / _sql_ms(a):.2f}   ({_sql_ms(a):.2f} -> {_sql_ms(b):.2f} ms/tick)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="comma-separated catalogue sizes (cards)")
    parser.add_argument("--backlog", type=int, default=1000, help="pending cards spread over the id range")
    parser.add_argument("--newest", type=int, default=10, help="new pending cards above the sensor cursor")
    parser.add_argument("--reps", type=int, default=30, help="timed ticks per size and kind")
    parser.add_argument("--warmup", type=int, default=3, help="untimed ticks first")
    parser.add_argument("--top", type=int, default=3, help="slowest statements to list per size")
    parser.add_argument("--explain", action="store_true", help="print the plan of the slowest cards query")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL instead of SQLite")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if len(sizes) < 2 or args.backlog + args.newest >= sizes[0]:
        parser.error("need two or more sizes, each larger than --backlog + --newest")

    with tempfile.TemporaryDirectory(prefix="stage-e-bench-") as tmp:
        streaming_environment(Path(tmp), database_url=f"sqlite:///{Path(tmp) / 'unused.sqlite'}")
        if args.postgres:
            bench("postgres", lambda: pg_database("stage_e_bench_tick"), sizes, args)
        else:
            counter = iter(range(len(sizes)))

            @contextmanager
            def sqlite_url():  # type: ignore[no-untyped-def]
                path = Path(tmp) / f"catalog-{next(counter)}.sqlite"
                yield f"sqlite:///{path}"
                path.unlink(missing_ok=True)

            bench("sqlite", sqlite_url, sizes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
