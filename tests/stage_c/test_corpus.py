"""The synthetic corpus: deterministic per seed, loaded into the catalogue, labelled."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sqlalchemy as sa
from PIL import Image

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card, Expansion, Printing
from stage_e_dagster.corpus.catalogue import build_catalogue
from stage_e_dagster.corpus.seed import clean_render, seed_corpus
from stage_e_dagster.stage_c.hashing import art_phash


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_same_seed_same_corpus(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    other = make_engine(f"sqlite:///{tmp_path / 'other.sqlite'}")
    upgrade(other)
    a = seed_corpus(sqlite_engine, tmp_path / "a", cards=16, seed=5, broken_share=0.3)
    b = seed_corpus(other, tmp_path / "b", cards=16, seed=5, broken_share=0.3)
    assert _digest(a.images_dir) == _digest(b.images_dir)
    assert a.labels_path.read_text() == b.labels_path.read_text()
    assert seed_corpus(other, tmp_path / "c", cards=16, seed=6).labels_path.read_text() != a.labels_path.read_text()
    other.dispose()


def test_corpus_rows_and_labels(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    summary = seed_corpus(sqlite_engine, tmp_path, cards=30, seed=2, broken_share=0.3)
    labels = [json.loads(line) for line in summary.labels_path.read_text().splitlines()]
    assert len(labels) == 30 and sum(summary.broken.values()) == sum(1 for lb in labels if lb["broken"])
    with sqlite_engine.connect() as conn:
        cards = {r.identifier: r for r in conn.execute(sa.select(Card))}
        codes = set(conn.execute(sa.select(Expansion.code)).scalars())
        printings = conn.execute(sa.select(sa.func.count()).select_from(Printing)).scalar_one()
    assert printings == summary.printings and len(codes) == summary.expansions
    for label in labels:
        row = cards[label["identifier"]]
        assert row.image_locator.startswith("file:///") and row.stage_c_pending
        assert label["set_code"] in codes
        exists = Path(row.image_locator[len("file://"):]).exists()
        assert exists is (label["broken"] != "missing")
    assert {"broken", "collector_line_printed", "bleed_class", "border_color", "custom_art", "lang"} <= set(labels[0])
    # Seeding again adds nothing.
    seed_corpus(sqlite_engine, tmp_path, cards=30, seed=2, broken_share=0.3)
    with sqlite_engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(Card)).scalar_one() == 30


def test_printing_art_phash_is_the_clean_render_hash(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    import random

    seed_corpus(sqlite_engine, tmp_path, cards=10, seed=4)
    _, specs = build_catalogue(random.Random(4), 10)
    with sqlite_engine.connect() as conn:
        stored = {(code, number, lang): phash for code, number, lang, phash in conn.execute(
            sa.select(Expansion.code, Printing.collector_number, Printing.lang, Printing.art_phash).join(Expansion))}
    spec = specs[0]
    assert isinstance(clean_render(spec), Image.Image)
    assert stored[(spec.set_code.lower(), spec.collector_number, spec.lang)] == art_phash(clean_render(spec))
