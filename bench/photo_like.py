"""Synthetic scores per condition of the photo-like corpus: where today's Stage C and Stage D fail.

Seeds ``stage-e seed --photo-like`` into a throwaway SQLite catalogue (every condition the same
number of cards), runs Stage C (real localisation and the PP-OCR reader) and Stage D over it in this
process, as ``stage-e bulk --stage all`` does, and prints one row per condition: cards, collector
numbers read right (of the cards that print one), set codes read right (of those that print one),
machine votes, wrong machine votes and the votes the art fallback cast; then, per condition, what
each calculator's pass came to (``join-key:border-mismatch 4``), which says why a row fails. Not a
speed benchmark: it prints scores, not ratios.

    .venv/bin/python bench/photo_like.py [--per-condition 10] [--seed 0] [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.cli.evaluate import by_table
from stage_e_dagster.cli.output import print_table
from stage_e_dagster.corpus.photo import CONDITIONS
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.evaluation.conditions import outcomes_by_condition, scores_by_condition
from stage_e_dagster.evaluation.labels import load_labels
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.run import run_stage_c
from stage_e_dagster.stage_d.run import run_stage_d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-condition", type=int, default=10, help="cards per condition (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--keep", type=Path, help="write the corpus and catalogue here and keep them")
    args = parser.parse_args()

    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="photo-like-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        engine = make_engine(f"sqlite:///{work / 'catalog.sqlite'}")
        upgrade(engine)
        started = time.perf_counter()
        summary = seed_corpus(engine, work / "corpus", cards=args.per_condition * len(CONDITIONS), seed=args.seed,
                              photo_like=True)
        seeded = time.perf_counter()
        with ImageFetcher(engine=engine, image_roots=[work / "corpus"], allowed_hosts=[], timeout_s=30,
                          max_bytes=25 << 20, rate_per_sec=1000) as fetcher:
            run_stage_c(engine, None, writer="bulk:photo-like", run_id="photo-like-c", fetcher=fetcher)
        run_stage_d(engine, None, run_id="photo-like-d")
        done = time.perf_counter()
        labels = load_labels(summary.labels_path)
        rows = scores_by_condition(engine, labels)
        outcomes = outcomes_by_condition(engine, labels)
        engine.dispose()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"conditions": rows, "outcomes": outcomes}, indent=2))
        return
    print(f"photo-like corpus: {summary.cards} cards, {args.per_condition} per condition, seed {args.seed}; "
          f"seeded in {seeded - started:.0f} s, Stage C + D in {done - seeded:.0f} s")
    print_table(by_table(rows))
    print("Stage D outcomes per condition (calculator:outcome cards):")
    for name, counts in outcomes.items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
