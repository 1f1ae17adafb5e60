"""Stage C cost per card against a floor, and against main today's reader, measured in the same run.

The floor is what no Stage C can avoid: decode the image and make one in-process Tesseract read of
the bottom band it reads (prepared as the first tier prepares it). Stage C is the whole per-card
path (file fetch, localisation, all extractors, persist). The baseline is the same Stage C with
main today's reader: a ``tesseract`` process per read, as pytesseract starts one (a PNG written,
the TSV read back). Each arm drains its own copy of one seeded catalogue; the arms take turns,
a few cards at a time, so a busy machine weighs on both alike. CPU includes finished child
processes, so the baseline pays for its ``tesseract`` processes.

    .venv/bin/python bench/stage_c.py [--cards 40] [--seed 0] [--chunk 8]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import sqlalchemy as sa
from PIL import Image

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.stage_c import ocr
from stage_e_dagster.stage_c.compute import compute_evidence, sha256_hex
from stage_e_dagster.stage_c.decode import decode_image
from stage_e_dagster.stage_c.extractors import EXTRACTOR_GROUPS
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.geometry import box_px, classify_bleed, trim_box
from stage_e_dagster.stage_c.lexicon import known_set_codes
from stage_e_dagster.stage_c.ocr import OcrWord, prepare
from stage_e_dagster.stage_c.run import run_stage_c

Reader = Callable[[Image.Image, int], list[OcrWord]]
IN_PROCESS: Reader = ocr.tesseract_words


def cpu_seconds() -> float:
    """This process's CPU plus that of its finished children (the baseline's ``tesseract`` processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def subprocess_words(image: Image.Image, psm: int) -> list[OcrWord]:
    """Main today's read: one ``tesseract`` process per call, fed a PNG file, its TSV read back."""
    with tempfile.TemporaryDirectory(prefix="bench-tess-") as tmp:
        source = Path(tmp) / "input.png"
        image.save(source)
        subprocess.run(["tesseract", str(source), str(Path(tmp) / "out"), "--psm", str(psm),
                        "-c", "tessedit_do_invert=0", "tsv"], check=True, capture_output=True)
        rows = list(csv.DictReader(io.StringIO((Path(tmp) / "out.tsv").read_text()), delimiter="\t",
                                   quoting=csv.QUOTE_NONE))
    return [
        OcrWord(text=row["text"].strip(), left=int(row["left"]), top=int(row["top"]), width=int(row["width"]),
                height=int(row["height"]), conf=float(row["conf"]),
                line=(int(row["block_num"]), int(row["par_num"]), int(row["line_num"])))
        for row in rows if row["level"] == "5" and (row["text"] or "").strip()
    ]


@contextmanager
def reading_with(reader: Reader) -> Iterator[None]:
    """Stage C reads every band through ``ocr.tesseract_words``; swap it for one arm."""
    ocr.tesseract_words = reader
    try:
        yield
    finally:
        ocr.tesseract_words = IN_PROCESS


def floor_cpu(images: list[bytes], readers: list[Reader]) -> list[float]:
    """Per reader, mean CPU seconds per image to decode it and make one read of its bottom band;
    the readers take turns image by image."""
    spent = [0.0] * len(readers)
    for data in images:
        for i, reader in enumerate(readers):
            start = cpu_seconds()
            image = decode_image(data).image
            assert image is not None
            bleed = classify_bleed(*image.size)
            left, top, right, bottom = trim_box(*image.size, bleed)
            reader(prepare(image.crop(box_px("bottom_lines", *image.size, bleed)), bottom - top), 6)
            spent[i] += cpu_seconds() - start
    return [s / len(images) for s in spent]


@dataclass
class Arm:
    """One side of the comparison: its reader, its copy of the catalogue, what it spent."""

    name: str
    reader: Reader
    engine: sa.Engine
    fetcher: ImageFetcher
    cpu: float = 0.0
    wall: float = 0.0
    completed: int = 0
    chunks: list[float] = field(default_factory=list)

    def drain(self, ids: list[int], lexicon: frozenset[str]) -> None:
        with reading_with(self.reader):
            start_cpu, start_wall = cpu_seconds(), time.perf_counter()
            report = run_stage_c(self.engine, ids, writer="bulk:bench", run_id=f"bench-{self.name}",
                                 fetcher=self.fetcher, lexicon=lexicon)
            cpu = cpu_seconds() - start_cpu
        self.cpu += cpu
        self.wall += time.perf_counter() - start_wall
        self.completed += report.completed
        self.chunks.append(cpu / max(1, report.completed))

    @property
    def cpu_per_card(self) -> float:
        return self.cpu / max(1, self.completed)

    @property
    def wall_per_card(self) -> float:
        return self.wall / max(1, self.completed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=8, help="cards each arm drains before the other's turn")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        template = folder / "template.sqlite"
        seeding = make_engine(f"sqlite:///{template}")
        upgrade(seeding)
        seed_corpus(seeding, folder / "corpus", cards=args.cards, seed=args.seed, broken_share=0.0)
        lexicon = known_set_codes(seeding)
        with seeding.connect() as conn:
            card_ids = list(conn.execute(sa.select(Card.id).order_by(Card.id)).scalars())
        seeding.dispose()
        images = [p.read_bytes() for p in sorted((folder / "corpus" / "images").iterdir())]

        arms = []
        for name, reader in (("in-process", IN_PROCESS), ("main-today", subprocess_words)):
            shutil.copy(template, folder / f"{name}.sqlite")
            engine = make_engine(f"sqlite:///{folder / f'{name}.sqlite'}")
            fetcher = ImageFetcher(engine=engine, image_roots=[folder], allowed_hosts=[], timeout_s=10,
                                   max_bytes=50_000_000, rate_per_sec=1000)
            arms.append(Arm(name, reader, engine, fetcher))

        # Warm both readers (the engine's model load, the font, the page cache) so no side pays a first-call cost.
        floor_cpu(images[:2], [IN_PROCESS, subprocess_words])
        floor, floor_process = floor_cpu(images, [IN_PROCESS, subprocess_words])

        groups: dict[str, list[float]] = defaultdict(list)
        attempts: list[int] = []
        for data in images:
            result = compute_evidence(sha256_hex(data), data, latency_ms=0.0, lexicon=lexicon)
            for step in ("decode", "localise"):  # timed by compute_evidence before any extractor
                groups[step].append(result.timings_ms.get(step, 0.0))
            for group, keys in EXTRACTOR_GROUPS.items():
                groups[group].append(sum(result.timings_ms.get(k, 0.0) for k in keys))
            attempts.append(result.ocr_attempts)

        for turn, start in enumerate(range(0, len(card_ids), args.chunk)):
            chunk = card_ids[start:start + args.chunk]
            for arm in (arms if turn % 2 == 0 else arms[::-1]):
                arm.drain(chunk, lexicon)
        for arm in arms:
            arm.fetcher.close()
            arm.engine.dispose()

    ours, today = arms
    print(f"cards: {len(images)} (seed {args.seed}); completed: {ours.name} {ours.completed}, "
          f"{today.name} {today.completed}")
    print("per-card wall ms by extractor group (in-process reader, compute only, mean / median):")
    for group, values in groups.items():
        print(f"  {group:<8} {statistics.mean(values):8.1f} / {statistics.median(values):8.1f}")
    print(f"Tesseract reads per card: {statistics.mean(attempts):.2f} (max {max(attempts)})")
    print(f"floor, decode + one in-process Tesseract read of the bottom band: {floor * 1000:.1f} ms CPU")
    print(f"same floor with a tesseract process per read (main today):        {floor_process * 1000:.1f} ms CPU "
          f"({floor_process / floor:.2f}x)")
    for arm in arms:
        spread = f"chunks {min(arm.chunks) * 1000:.0f}-{max(arm.chunks) * 1000:.0f}"
        print(f"stage C per card, {arm.name:<10}: {arm.cpu_per_card * 1000:7.1f} ms CPU ({spread}), "
              f"{arm.wall_per_card * 1000:7.1f} ms wall (fetch + localise + extract + persist)")
    print(f"cards per second per core: {1 / ours.cpu_per_card:.2f} ({today.name}: {1 / today.cpu_per_card:.2f})")
    print(f"ratio stage C / floor: {ours.cpu_per_card / floor:.2f}  (target <= 3)")
    print(f"speed-up over main today, same run: {today.cpu_per_card / ours.cpu_per_card:.2f}x CPU, "
          f"{today.wall_per_card / ours.wall_per_card:.2f}x wall  (target >= 2)")


if __name__ == "__main__":
    main()
