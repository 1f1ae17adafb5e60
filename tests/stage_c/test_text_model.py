"""The text model's own steps give what rapidocr's give: the detector's input made in float32 is rapidocr's
float64-made tensor bit for bit, and the boxes found are the boxes rapidocr's detector finds (issue 39)."""

from __future__ import annotations

import random

import numpy as np
from PIL import Image

from stage_e_dagster.corpus.catalogue import build_catalogue
from stage_e_dagster.corpus.render import Variant, render_card
from stage_e_dagster.stage_c import text_model


def card_photo() -> np.ndarray:
    """A rendered card on a table, as the reader's BGR array."""
    _, specs = build_catalogue(random.Random(5), 20)
    card = render_card(specs[3], Variant(height=700), noise_seed=2)
    table = Image.new("RGB", (card.width + 90, card.height + 60), (120, 98, 70))
    table.paste(card, (45, 30))
    return np.ascontiguousarray(np.asarray(table)[:, :, ::-1])


def test_the_detector_input_is_rapidocrs_bit_for_bit() -> None:
    det = text_model.models().det
    pre = text_model.models().det_pre
    rng = np.random.default_rng(3)
    images = [card_photo()] + [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((640, 457), (97, 1600), (33, 40))]
    for image in images:
        ours = text_model._detector_input(pre, image)
        theirs = det.get_preprocess()(image)
        assert ours.dtype == theirs.dtype == np.float32
        assert ours.flags.c_contiguous
        assert np.array_equal(ours, theirs), image.shape


def test_detect_finds_the_boxes_rapidocrs_detector_finds() -> None:
    image = card_photo()
    det = text_model.models().det
    theirs = np.asarray(det(image).boxes, dtype=np.float32)
    ours = text_model.detect(image)
    assert len(ours) >= 5  # a card's lines: title, type line, rules, collector line
    assert np.array_equal(ours, theirs)
