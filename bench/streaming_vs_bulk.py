"""Streaming where a user would compare it: the real ``dagster-daemon`` against ``stage-e bulk``.

Two questions an operator asks before switching streaming on:

  1. Throughput: does streaming drain a backlog about as fast as the bulk tool would? One synthetic
     corpus is seeded once (rendered images, real Tesseract in Stage C, ~5% broken images); each side
     drains its own copy of the catalogue, in its own state folder and ``DAGSTER_HOME``:
       * bulk:   ``stage-e bulk --stage all --workers N``, timed from the command's start to its exit;
       * stream: ``dagster-daemon run -w workspace.yaml`` with the project's ``dagster.yaml`` and the
                 default dispatch settings (batches sized by work, ``STAGE_E_MAX_CONCURRENT_DISPATCHES``
                 = N). The daemon is started on the catalogue with the backlog taken out, and once its
                 dispatch sensor has ticked, the backlog's rows are inserted again in one transaction, as
                 an importer would, half a sensor pass after a tick (the mean wait of a commit at a
                 random moment). Timed from that commit to the backlog empty (no card pending either
                 stage, no micro-batch pending or running): a streaming deployment keeps its daemon
                 running, so a backlog pays the sensor's noticing it, the runs' start-up and the work,
                 not the daemon's start. The daemon's start to its first dispatch tick is printed beside,
                 as is the drain timed from the first run's start (what dispatch alone costs).
     With ``--reps`` above 1 the order alternates, so drifting load hits both sides alike.
  2. Latency: on a trickle into an idle daemon (the stream side of the last repetition, once
     drained), how long from a card's insert commit to its ``image_evidence`` row? The trickled
     cards are readable seeded cards held back from the catalogue and inserted with raw SQL, as any
     writer would, one every ``--trickle-every`` seconds.

The envelope's bars are raised out of reach on both sides (as in every benchmark here): the bulk
tool ignores them, and on a shared 2-core machine the default host-load bar would throttle or trip
the stream side, so the figure would measure the neighbours instead of dispatch.

Usage:
  python bench/streaming_vs_bulk.py                                      # 600 cards, N=2, 10-card trickle
  python bench/streaming_vs_bulk.py --reps 2                             # bulk, stream, stream, bulk
  python bench/streaming_vs_bulk.py --cards 12 --trickle 2 --trickle-every 2   # smoke size, ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import sqlalchemy as sa
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import (  # noqa: E402
    BIN,
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

from stage_e_dagster.catalog.models import Card  # noqa: E402
from stage_e_dagster.defs.run_ends import runs_in_progress  # noqa: E402

POLL_S = 0.2
# The sensor daemon's pass: at least 5 s (Dagster's MIN_INTERVAL_LOOP_TIME), and the dispatch sensors tick on each.
SENSOR_PASS_S = 5.0
INSERT_CARD = sa.text(
    "INSERT INTO cards (identifier, name, image_locator, card_type, dpi, declared_content_hash) "
    "VALUES (:identifier, :name, :image_locator, :card_type, :dpi, :declared_content_hash)"
)


@dataclass
class BulkDrain:
    cards: int
    wall_s: float
    report: dict[str, object]


@dataclass
class StreamDrain:
    cards: int
    wall_s: float
    from_first_run_s: float
    boot_s: float
    runs: int
    failed_runs: int
    latencies_s: list[float] = field(default_factory=list)


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


def readable_tail(corpus: Path, count: int) -> list[str]:
    """The identifiers of the last ``count`` readable seeded cards: the trickle's real, unseen images
    (a broken one would skip OCR and flatter the latency)."""
    labels = [json.loads(line) for line in (corpus / "labels.jsonl").read_text().splitlines()]
    return [label["identifier"] for label in labels if label["broken"] is None][-count:] if count else []


def take_out(url: str, identifiers: list[str] | None = None) -> list[dict[str, object]]:
    """Delete cards (all of them when ``identifiers`` is None) from a catalogue copy and return their
    rows, for inserting again later with raw SQL, as any writer would."""
    engine = plain_engine(url)
    columns = (Card.identifier, Card.name, Card.image_locator, Card.card_type, Card.dpi, Card.declared_content_hash)
    chosen = sa.true() if identifiers is None else Card.identifier.in_(identifiers)
    with engine.begin() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(*columns).where(chosen).order_by(Card.id)).mappings()]
        conn.execute(sa.delete(Card).where(chosen))
    engine.dispose()
    return rows


def card_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(Card)).scalar_one()


def drain_with_bulk(side: Side, workers: int, timeout_s: float) -> BulkDrain:
    """``stage-e bulk --stage all``: what an operator runs by hand over a backlog."""
    command = [str(BIN / "stage-e"), "bulk", "--stage", "all", "--workers", str(workers), "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, env=side.env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bulk failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    reader = plain_engine(side.url)
    left, cards = backlog(reader), card_count(reader)
    reader.dispose()
    if left[0]:
        raise SystemExit(f"bulk exited with {left[0]} cards still pending: the sides would not do the same work")
    return BulkDrain(cards, wall, json.loads(done.stdout.strip().splitlines()[-1]))


def wait_until(done: Callable[[], bool], daemon: subprocess.Popen[bytes], log: Path, timeout_s: float,
               what: str) -> None:
    deadline = time.perf_counter() + timeout_s
    while not done():
        if daemon.poll() is not None or time.perf_counter() > deadline:
            raise SystemExit(f"stream side: no {what} (daemon exit {daemon.poll()}); log tail:\n"
                             f"{log.read_text()[-3000:]}")
        time.sleep(POLL_S)


def last_dispatch_tick(engine: sa.Engine) -> float | None:
    """When the dispatch sensor of new cards last ticked (its heartbeat row), as a Unix time."""
    with engine.connect() as conn:
        ticked = conn.execute(sa.text("SELECT ticked_at FROM sensor_heartbeats WHERE sensor_name = :name"),
                              {"name": "card_created_sensor"}).scalar_one_or_none()
    if ticked is None:
        return None
    ticked = datetime.fromisoformat(ticked) if isinstance(ticked, str) else ticked
    return ticked.replace(tzinfo=ticked.tzinfo or timezone.utc).timestamp()


def drain_with_daemon(side: Side, folder: Path, timeout_s: float, trickle: list[dict[str, object]],
                      every_s: float) -> StreamDrain:
    """The real daemon, already running, given the same backlog in one commit; then, if asked, the
    trickle into it while it idles."""
    rows = take_out(side.url)
    reader = plain_engine(side.url)
    instance = DagsterInstance.from_config(str(side.home))
    log = folder / f"{side.name}-daemon.log"
    daemon_started = time.time()
    with running_daemon(side.env, log) as daemon:
        wait_until(lambda: last_dispatch_tick(reader) is not None, daemon, log, 300, "first dispatch tick")
        first_tick = last_dispatch_tick(reader)
        boot = first_tick - daemon_started  # type: ignore[operator]
        # An importer commits at any moment of the sensor daemon's pass: the commit goes in half a
        # pass after a tick, the mean wait for such a commit (right after one would be the worst case).
        wait_until(lambda: last_dispatch_tick(reader) != first_tick, daemon, log, 60, "second dispatch tick")
        time.sleep(SENSOR_PASS_S / 2)
        with reader.begin() as conn:
            conn.execute(INSERT_CARD, rows)
        committed = time.time()
        wait_until(lambda: backlog(reader) == (0, 0), daemon, log, timeout_s, "empty backlog")
        drained_at = time.time()
        cards = card_count(reader)
        # Let the last runs write their final events, so the trickle starts on an idle daemon.
        wait_until(lambda: runs_in_progress(instance) == 0, daemon, log, 120, "idle daemon")
        records = instance.get_run_records(RunsFilter(tags={"stage_e/dispatch": "micro-batch"}))
        latencies = trickle_latencies(side.url, trickle, every_s, daemon, log) if trickle else []
        if trickle:
            wait_until(lambda: backlog(reader) == (0, 0) and runs_in_progress(instance) == 0,
                       daemon, log, 120, "idle daemon after the trickle")
    first_start = min(r.start_time for r in records if r.start_time is not None)
    failed = sum(r.dagster_run.status != DagsterRunStatus.SUCCESS for r in records)
    instance.dispose()
    reader.dispose()
    return StreamDrain(cards, drained_at - committed, drained_at - first_start, boot, len(records), failed, latencies)


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


def report(bulks: list[BulkDrain], streams: list[StreamDrain], workers: int, batch_size: str) -> None:
    print()
    for i, (b, s) in enumerate(zip(bulks, streams), start=1):
        print(f"rep {i}: bulk {b.cards} cards in {b.wall_s:.1f} s ({b.cards / b.wall_s:.3f} cards/s); stream "
              f"{s.cards} cards in {s.wall_s:.1f} s from the backlog's commit ({s.cards / s.wall_s:.3f} cards/s), "
              f"{s.from_first_run_s:.1f} s from first run start; {s.runs} runs, {s.failed_runs} not successful; "
              f"daemon start to first dispatch tick {s.boot_s:.1f} s")
    cards = sum(b.cards for b in bulks)
    bulk_rate = cards / sum(b.wall_s for b in bulks)
    stream_rate = sum(s.cards for s in streams) / sum(s.wall_s for s in streams)
    first_run_rate = sum(s.cards for s in streams) / sum(s.from_first_run_s for s in streams)
    print(f"bulk   (stage-e bulk --stage all --workers {workers}): {bulk_rate:.3f} cards/s")
    print(f"stream (dagster-daemon, batches: {batch_size}, {workers} concurrent dispatches): "
          f"{stream_rate:.3f} cards/s from the backlog's commit, {first_run_rate:.3f} cards/s from first run start")
    print(f"ratio streaming/bulk: {stream_rate / bulk_rate:.3f} from the backlog's commit   (target >= 0.9); "
          f"{first_run_rate / bulk_rate:.3f} from first run start")
    print(f"daemon start to its first dispatch tick (once per daemon start): "
          f"{median([s.boot_s for s in streams]):.1f} s")
    latencies = [x for s in streams for x in s.latencies_s]
    if latencies:
        print(f"trickle insert -> evidence, {len(latencies)} cards: p50 {median(latencies):.2f} s  "
              f"max {max(latencies):.2f} s   (target p50 <= 8 s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=600, help="cards each side drains")
    parser.add_argument("--workers", type=int, default=2,
                        help="bulk --workers, and STAGE_E_MAX_CONCURRENT_DISPATCHES for the daemon (its default: 2)")
    parser.add_argument("--trickle", type=int, default=10, help="cards inserted one by one into the idle daemon")
    parser.add_argument("--trickle-every", type=float, default=10.0, help="seconds between trickle inserts")
    parser.add_argument("--reps", type=int, default=1, help="drains per side, order alternating")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--batch-size", type=int, help="a fixed STAGE_E_MICRO_BATCH_SIZE (default: sized by work)")
    parser.add_argument("--keep", type=Path, help="keep the work folder here instead of a temporary one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="stage-e-svb-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        template, corpus = seed_template(folder, args.cards + args.trickle, args.seed)
        held = take_out(f"sqlite:///{template}", readable_tail(corpus, args.trickle))
        streaming_environment(folder / "state", database_url="sqlite:///unused.sqlite", image_roots=corpus)
        os.environ["STAGE_E_MAX_CONCURRENT_DISPATCHES"] = str(args.workers)
        if args.batch_size is None:  # the default: batches sized by work (dispatch/sizing.py)
            os.environ.pop("STAGE_E_MICRO_BATCH_SIZE", None)
        else:
            os.environ["STAGE_E_MICRO_BATCH_SIZE"] = str(args.batch_size)
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
        report(bulks, streams, args.workers, os.environ.get("STAGE_E_MICRO_BATCH_SIZE", "work-sized"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
