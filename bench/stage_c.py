"""Stage C cost per card against a floor measured in the same run on the same images.

The floor is what no Stage C can avoid: decode the image and make one Tesseract call on its
collector-line crop. Stage C is the whole per-card path (file fetch, all extractors, persist).
Prints per-card milliseconds per extractor group, cards per second per core, and the ratio.

    .venv/bin/python bench/stage_c.py [--cards 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.stage_c.compute import compute_evidence, sha256_hex
from stage_e_dagster.stage_c.decode import decode_image
from stage_e_dagster.stage_c.extractors import EXTRACTOR_GROUPS
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.geometry import box_px, classify_bleed, trim_box
from stage_e_dagster.stage_c.lexicon import known_set_codes
from stage_e_dagster.stage_c.ocr import prepare, tesseract_words
from stage_e_dagster.stage_c.run import run_stage_c


def cpu_seconds() -> float:
    """This process's CPU plus that of finished children (each Tesseract call is a child process)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def floor_cpu(images: list[bytes], box: str) -> float:
    """Mean CPU seconds per image to decode it and make one Tesseract call on the named crop."""
    start = cpu_seconds()
    for data in images:
        image = decode_image(data).image
        assert image is not None
        bleed = classify_bleed(*image.size)
        left, top, right, bottom = trim_box(*image.size, bleed)
        crop = image.crop(box_px(box, *image.size, bleed))
        tesseract_words(prepare(crop, bottom - top), 6)
    return (cpu_seconds() - start) / len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        engine = make_engine(f"sqlite:///{folder / 'bench.sqlite'}")
        upgrade(engine)
        seed_corpus(engine, folder / "corpus", cards=args.cards, seed=args.seed, broken_share=0.0)
        images = [p.read_bytes() for p in sorted((folder / "corpus" / "images").iterdir())]
        lexicon = known_set_codes(engine)

        # Warm caches (font, model files) so no side pays a first-call cost.
        floor_cpu(images[:2], "collector")

        floor_collector = floor_cpu(images, "collector")
        floor_band = floor_cpu(images, "bottom_lines")

        groups: dict[str, list[float]] = defaultdict(list)
        attempts: list[int] = []
        compute_start = cpu_seconds()
        for data in images:
            result = compute_evidence(sha256_hex(data), data, latency_ms=0.0, lexicon=lexicon)
            groups["decode"].append(result.timings_ms.get("decode", 0.0))
            for group, keys in EXTRACTOR_GROUPS.items():
                groups[group].append(sum(result.timings_ms.get(k, 0.0) for k in keys))
            attempts.append(result.ocr_attempts)
        compute_cpu = (cpu_seconds() - compute_start) / len(images)

        fetcher = ImageFetcher(engine=engine, image_roots=[folder], allowed_hosts=[], timeout_s=10,
                               max_bytes=50_000_000, rate_per_sec=10)
        start_cpu, start_wall = cpu_seconds(), time.perf_counter()
        report = run_stage_c(engine, None, writer="bulk:bench", run_id="bench", fetcher=fetcher, lexicon=lexicon)
        stage_c_cpu = (cpu_seconds() - start_cpu) / max(1, report.completed)
        stage_c_wall = (time.perf_counter() - start_wall) / max(1, report.completed)
        fetcher.close()
        engine.dispose()

    print(f"cards: {len(images)} (seed {args.seed}); completed by run_stage_c: {report.completed}")
    print("per-card wall ms by extractor group (compute only, mean / median):")
    for group, values in groups.items():
        print(f"  {group:<8} {statistics.mean(values):8.1f} / {statistics.median(values):8.1f}")
    print(f"Tesseract reads per card: {statistics.mean(attempts):.2f} (max {max(attempts)}); "
          f"extraction alone: {compute_cpu * 1000:.1f} ms CPU per card")
    print(f"stage C per card: {stage_c_cpu * 1000:.1f} ms CPU, {stage_c_wall * 1000:.1f} ms wall "
          f"(fetch + extract + persist)")
    print(f"cards per second per core: {1 / stage_c_cpu:.2f}")
    print(f"floor, decode + one Tesseract call on the bottom-lines crop Stage C reads: {floor_band * 1000:.1f} ms CPU")
    print(f"floor, decode + one Tesseract call on the left collector-number crop:     "
          f"{floor_collector * 1000:.1f} ms CPU")
    print(f"ratio stage C / floor (bottom-lines crop): {stage_c_cpu / floor_band:.2f}  (target <= 3)")
    print(f"ratio stage C / floor (left collector crop): {stage_c_cpu / floor_collector:.2f}")


if __name__ == "__main__":
    main()
