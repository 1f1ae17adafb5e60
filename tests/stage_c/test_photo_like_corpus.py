"""``seed_corpus(photo_like=True)``: each condition is written, labelled, and shows in the image.

Renders two cards per condition and checks, per condition, that the printing is of the kind the
condition names (format, border, language), that the label matches the catalogue, and that the
photograph differs from the baseline in the way the condition says (tilt, blur, glare, sleeve,
clutter, JPEG quality, resolution), measured on the written files.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from PIL import Image, ImageFilter

from stage_e_dagster.catalog.models import Card, Expansion, Printing
from stage_e_dagster.corpus.catalogue import STYLE_CYCLE, build_catalogue
from stage_e_dagster.corpus.photo import CONDITIONS, Photo, photograph
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.evaluation.labels import load_labels

PER_CONDITION = 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> tuple[Path, list[dict[str, Any]]]:
    from stage_e_dagster.catalog.engine import make_engine

    folder = tmp_path_factory.mktemp("photo-like")
    db = folder / "catalog.sqlite"
    db.write_bytes(sqlite_template.read_bytes())
    engine = make_engine(f"sqlite:///{db}")
    summary = seed_corpus(engine, folder / "corpus", cards=PER_CONDITION * len(CONDITIONS), seed=3, photo_like=True)
    with engine.connect() as conn:
        printings = {(code, number, lang): (style_border[0], style_border[1]) for code, number, lang, *style_border in
                     conn.execute(sa.select(Expansion.code, Printing.collector_number, Printing.lang,
                                            Printing.frame, Printing.border_color)
                                  .join(Expansion, Expansion.id == Printing.expansion_id)).all()}
        cards = dict(conn.execute(sa.select(Card.identifier, Card.image_locator)).all())
    engine.dispose()
    labels = load_labels(summary.labels_path)
    for label in labels:
        label["_catalogue"] = printings.get((label["set_code"], label["collector_number"], label["lang"]))
        label["_locator"] = cards.get(label["identifier"])
    return folder, labels


def by_condition(labels: list[dict[str, Any]], condition: str) -> list[dict[str, Any]]:
    return [lb for lb in labels if lb["condition"] == condition]


def image_of(label: dict[str, Any]) -> Image.Image:
    path = Path(label["_locator"].removeprefix("file://"))
    with Image.open(path) as img:
        img.load()
        return img


def test_every_condition_is_written_with_labels_matching_the_catalogue(corpus: tuple[Path, list]) -> None:
    _, labels = corpus
    assert Counter(lb["condition"] for lb in labels) == {c: PER_CONDITION for c in CONDITIONS}
    for label in labels:
        assert label["_catalogue"] is not None, label["identifier"]  # the labelled printing is in the catalogue
        frame, border = label["_catalogue"]
        assert (frame, border) == (label["frame"], label["border_color"])
        assert label["_locator"].startswith("file://")
        img = image_of(label)
        assert img.format == "JPEG" and img.size == (label["width"], label["height"])


@pytest.mark.parametrize("condition, check", [
    ("baseline", lambda lb: (lb["style"], lb["border_color"], lb["lang"]) == ("slash", "black", "en")),
    ("format-pre2015", lambda lb: lb["style"] == "pre2015" and lb["frame"] == "2003" and not lb["set_code_printed"]
     and lb["printed_lines"][1].endswith(f"{lb['collector_number']}/{lb['printed_lines'][1].split('/')[-1]}")),
    ("format-2015", lambda lb: lb["style"] == "slash"
     and lb["printed_lines"][1] == f"{lb['set_code'].upper()} \u2022 {lb['lang'].upper()}"),
    ("format-2023", lambda lb: lb["style"] == "rarity"
     and lb["printed_lines"][0].endswith(f"{int(lb['collector_number']):04d}")),
    ("format-old", lambda lb: lb["style"] == "old" and not lb["collector_line_printed"] and lb["printed_lines"] == []),
    ("border-black", lambda lb: lb["border_color"] == "black"),
    ("border-white", lambda lb: lb["border_color"] == "white"),
    ("border-borderless", lambda lb: lb["border_color"] == "borderless"),
    ("lang-other", lambda lb: lb["lang"] != "en" and lb["printed_lines"][1].endswith(lb["lang"].upper())),
    ("tilt", lambda lb: lb["tilt"] >= 0.05),
    ("blur", lambda lb: lb["blur"] >= 1.5),
    ("glare", lambda lb: lb["glare_stripes"] >= 1),
    ("sleeve", lambda lb: lb["sleeve"]),
    ("clutter", lambda lb: lb["background"] == "clutter"),
    ("jpeg", lambda lb: lb["jpeg_quality"] <= 40),
    ("low-res", lambda lb: lb["card_height"] <= 480),
    ("phone-photo", lambda lb: lb["tilt"] > 0 and lb["blur"] > 0 and lb["glare_stripes"] and lb["jpeg_quality"] <= 80),
])
def test_each_condition_labels_what_it_varies(corpus: tuple[Path, list], condition: str, check: Any) -> None:
    for label in by_condition(corpus[1], condition):
        assert check(label), label


def _quad_height(label: dict[str, Any]) -> float:
    ys = [y for _, y in label["card_corners"]]
    return max(ys) - min(ys)


def _sharpness(img: Image.Image) -> float:
    return float(np.asarray(img.convert("L").filter(ImageFilter.FIND_EDGES), dtype=np.float32).var())


def _busy_above_card(img: Image.Image, label: dict[str, Any]) -> float:
    """How much the photo changes down each column above the card (a table's lamp gradient runs across)."""
    top = int(min(y for _, y in label["card_corners"]))
    strip = np.asarray(img.convert("L"), dtype=np.float32)[: max(top - 4, 8)]
    return float(strip.std(axis=0).mean())


def test_the_photographs_differ_from_the_baseline_as_their_condition_says(corpus: tuple[Path, list]) -> None:
    labels = corpus[1]
    baseline = by_condition(labels, "baseline")
    base_quant = np.mean([np.mean(image_of(lb).quantization[0]) for lb in baseline])
    for lb in by_condition(labels, "jpeg"):
        assert np.mean(image_of(lb).quantization[0]) > 2 * base_quant  # coarser quantisation: a lower quality
    for lb in by_condition(labels, "low-res"):
        assert lb["height"] < 600 and _quad_height(lb) < 500
    for lb in by_condition(labels, "sleeve"):
        assert _quad_height(lb) > lb["card_height"] * 1.03  # the sleeve's rim around the card
    plain = max(_busy_above_card(image_of(lb), lb) for lb in baseline)
    for lb in by_condition(labels, "clutter"):
        assert _busy_above_card(image_of(lb), lb) > 3 * plain
    for lb in by_condition(labels, "tilt"):
        (x0, y0), (x1, y1), *_ = lb["card_corners"]
        assert abs(y1 - y0) > 0.03 * (x1 - x0) or abs(lb["rotation"]) > 1.5  # the top edge is not level


def test_glare_and_blur_change_the_same_photograph() -> None:
    """The same card photographed with and without the condition: glare brightens bands, blur softens."""
    _, specs = build_catalogue(random.Random(2), 20, styles=STYLE_CYCLE)
    card = next(p for p in specs if p.style == "slash")
    plain, _ = photograph(card, Photo(card_height=700), seed=9)
    glared, _ = photograph(card, replace(Photo(card_height=700), glare_stripes=2), seed=9)
    blurred, _ = photograph(card, replace(Photo(card_height=700), blur=2.0), seed=9)
    lift = np.asarray(glared.convert("L"), dtype=np.float32) - np.asarray(plain.convert("L"), dtype=np.float32)
    assert lift.min() >= -1 and (lift > 40).mean() > 0.03  # only brighter, and clearly so over a band
    assert _sharpness(blurred) < 0.5 * _sharpness(plain)


# sha256 of labels.jsonl for ``seed_corpus(cards=12, seed=0)`` as commit bb771da (before the photo-like
# mode) writes it: the default corpus, which the demo and the corpus tests rely on, must not move.
DEFAULT_LABELS_SHA256 = "c30c678478d026dde805d9a9e2fa706c4f4dde620bb66a3e7de4f8699bdcbf83"


def test_the_default_seed_is_unchanged_by_the_photo_like_mode(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    summary = seed_corpus(sqlite_engine, tmp_path / "corpus", cards=12, seed=0)
    assert hashlib.sha256(summary.labels_path.read_bytes()).hexdigest() == DEFAULT_LABELS_SHA256
