"""``stage-e bulk --stage all`` on the seed corpus: this tree against a baseline tree, in one sitting.

One seeded corpus (``stage-e seed``, the same seed the streaming bench uses), one catalogue copy per
drain, and ``stage-e bulk --stage all --workers N`` run from each tree's ``stage_e_dagster`` (the
baseline taken from git into a scratch folder) at the shipped settings, the two arms alternating
(baseline, this tree, this tree, baseline, ... with ``--reps``), so machine load falls on both alike.
Printed per drain: cards, seconds, cards per second and the CPU per card of the bulk process tree; then
the ratio of this tree's cards per second to the baseline's (medians over the repetitions).

    .venv/bin/python bench/bulk_vs_baseline.py [--cards 1000] [--seed 7] [--workers 2] [--reps 1]
        [--baseline-rev 914afec]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _support import TreeCpu, backlog, fresh_copy, plain_engine
from stage_c import BASELINE_REV, baseline_tree

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.5


def stage_e(tree: Path, url: str, images: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment of ``stage-e`` with ``stage_e_dagster`` from ``tree`` on the catalogue at ``url``."""
    # GLIBC_TUNABLES too: each tree's bulk pool starts its workers with what that tree ships.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_", "GLIBC_"))}
    env |= {"PYTHONPATH": str(tree), "STAGE_E_DATABASE_URL": url, "STAGE_E_IMAGE_ROOTS": str(images),
            "STAGE_E_STATE_DIR": str(Path(url.removeprefix("sqlite:///")).parent / "state")}
    return [sys.executable, "-c", "from stage_e_dagster.cli.main import main; main()"], env


def seeded(tree: Path, work: Path, cards: int, seed: int) -> tuple[Path, Path]:
    """The corpus seeded by the baseline tree (at its own schema, which this tree migrates up, not down)."""
    url, images = f"sqlite:///{work / 'template.sqlite'}", work / "images"
    images.mkdir()
    command, env = stage_e(tree, url, images)
    subprocess.run([*command, "db", "upgrade"], env=env, cwd=tree, check=True, capture_output=True)
    subprocess.run([*command, "seed", "--cards", str(cards), "--seed", str(seed), "--out", str(images / "corpus")],
                   env=env, cwd=tree, check=True, capture_output=True)
    with sqlite3.connect(work / "template.sqlite") as conn:  # the seed's writes into the file the drains copy
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return work / "template.sqlite", images


def drain(tree: Path, url: str, images: Path, workers: int, cards: int) -> dict[str, float]:
    """One ``stage-e bulk --stage all`` over the catalogue at ``url``, with ``stage_e_dagster`` from ``tree``."""
    if tree == ROOT:
        engine = make_engine(url)
        upgrade(engine)  # the baseline's schema to this tree's
        engine.dispose()
    command, env = stage_e(tree, url, images)
    started = time.perf_counter()
    bulk = subprocess.Popen([*command, "bulk", "--stage", "all", "--workers", str(workers), "--json"], env=env,
                            cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeCpu(bulk.pid) as cpu:
        stdout, stderr = bulk.communicate(timeout=7200)
    seconds = time.perf_counter() - started
    if bulk.returncode != 0:
        raise SystemExit(f"bulk from {tree} failed (exit {bulk.returncode}):\n{stdout[-2000:]}\n{stderr[-2000:]}")
    report = json.loads(stdout)  # bulk finished and said what it did
    done = (report.get("stage_c") or report).get("attempted", 0)
    if done < cards:
        raise SystemExit(f"bulk from {tree} read {done} of {cards} cards: {stdout[-1500:]}")
    engine = plain_engine(url)
    left = backlog(engine)
    engine.dispose()
    if left[0]:
        raise SystemExit(f"bulk from {tree} left {left[0]} cards pending: the arms would not do the same work")
    return {"seconds": seconds, "cpu_s": sum(seconds for _, seconds in cpu.by_kind().values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-bulk-") as tmp:
        work = Path(tmp)
        (work / "baseline").mkdir()
        trees = {"baseline": baseline_tree(args.baseline_rev, (work / "baseline").resolve()), "this tree": ROOT}
        started = time.perf_counter()
        template, images = seeded(trees["baseline"], work, args.cards, args.seed)
        print(f"seeded {args.cards} cards in {time.perf_counter() - started:.1f} s", flush=True)
        order = [name for rep in range(args.reps)
                 for name in (("baseline", "this tree") if rep % 2 == 0 else ("this tree", "baseline"))]
        rates: dict[str, list[float]] = {name: [] for name in trees}
        for i, name in enumerate(order):
            result = drain(trees[name], fresh_copy(template, work, f"drain{i}"), images, args.workers, args.cards)
            rate = args.cards / result["seconds"]
            rates[name].append(rate)
            print(f"[{name}] {args.cards} cards in {result['seconds']:.1f} s: {rate:.2f} cards/s; "
                  f"CPU per card {result['cpu_s'] / args.cards:.3f} s (the bulk process tree)", flush=True)
        ratio = statistics.median(rates["this tree"]) / statistics.median(rates["baseline"])
        print(f"ratio cards/s this tree / baseline ({args.baseline_rev}): {ratio:.2f}   (target >= {TARGET_RATIO:g})")


if __name__ == "__main__":
    main()
