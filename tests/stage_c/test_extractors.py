"""The extractors on rendered cards with small type, read by the real Tesseract."""

from __future__ import annotations

import io
import random
from datetime import date

import numpy as np
import pytest
from PIL import Image

from stage_e_dagster.catalog.evidence_facts import LAYOUT_CONFIDENCE_BAR
from stage_e_dagster.corpus.catalogue import PrintingSpec, build_catalogue
from stage_e_dagster.corpus.render import Variant, encode, render_card, render_face
from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.extractors import read_border
from stage_e_dagster.stage_c.hashing import art_phash, hamming
from stage_e_dagster.stage_c.manifest import MANIFEST_VERSIONS

SETS, SPECS = build_catalogue(random.Random(11), 80)
LEXICON = frozenset(s.code.lower() for s in SETS)


def first(style: str, border: str | None = None) -> PrintingSpec:
    return next(p for p in SPECS if p.style == style and (border is None or p.border_color == border))


def upload(p: PrintingSpec, **variant: object) -> bytes:
    v = Variant(**{"height": 1000, "jpeg_quality": 80, **variant})  # type: ignore[arg-type]
    return encode(render_card(p, v, noise_seed=1), v)


@pytest.mark.parametrize("style", ["slash", "rarity"])
def test_collector_line_read_from_small_type(style: str) -> None:
    p = first(style)
    data = upload(p, type_frac=0.015, bleed=True, noise=3.0, blur=0.5)
    result = compute_evidence("h", data, latency_ms=1.0, lexicon=LEXICON)
    assert result.fields["collector_number"] == p.collector_number
    assert result.fields["collector_set_code"] == p.set_code.lower()
    assert result.fields["collector_language"] == p.lang
    assert result.fields["bleed_class"] == "bleed"
    assert result.fields["copyright_year"] == p.released.year
    assert result.fields["artist_name"] == p.artist
    assert result.extractor_versions == dict(MANIFEST_VERSIONS)
    assert result.skip_reasons["collector_line_ocr"] is None


def test_old_frame_reads_the_illus_credit_and_skips_the_number() -> None:
    p = first("old")
    result = compute_evidence("h", upload(p, type_frac=0.018), latency_ms=1.0, lexicon=LEXICON)
    assert result.fields["collector_number"] is None
    assert result.skip_reasons["collector_line_ocr"] == "no-text"
    assert (result.fields["artist_name"], result.fields["illus_anchor_fired"]) == (p.artist, True)
    assert result.fields["copyright_year"] == p.released.year


@pytest.mark.parametrize("border", ["black", "borderless"])
def test_border_and_geometry(border: str) -> None:
    p = first("slash", border)
    result = compute_evidence("h", upload(p), latency_ms=1.0, lexicon=LEXICON,
                              keys=["geometry_bleed", "layout_class", "crop_coordinates"])
    assert result.fields["layout_class"] == border
    assert result.fields["bleed_class"] == "trimmed"
    assert set(result.extractor_versions) == {"geometry_bleed", "layout_class", "crop_coordinates"}
    assert "collector_number" not in result.fields  # only the requested keys run


def test_ambiguous_aspect_is_a_named_skip() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (500, 500), (20, 20, 20)).save(buf, format="PNG")
    result = compute_evidence("h", buf.getvalue(), latency_ms=1.0, keys=["geometry_bleed", "layout_class"])
    assert result.skip_reasons == {"geometry_bleed": "ambiguous", "layout_class": None}
    assert result.fields["layout_class"] == "black"


def test_art_phash_matches_the_clean_render_and_not_custom_art() -> None:
    p = first("slash")
    clean = art_phash(render_face(p, Variant(height=1040)))
    same = art_phash(Image.open(io.BytesIO(upload(p, height=900, bleed=True, noise=6.0, jpeg_quality=60))))
    custom = art_phash(Image.open(io.BytesIO(upload(p, art_seed=12345))))
    assert hamming(clean, same) <= 6
    assert hamming(clean, custom) > 12


def test_quality_and_colour_signals(card_jpeg: bytes) -> None:
    result = compute_evidence("h", card_jpeg, latency_ms=2.5, keys=["fetch_health", "quality_signals", "color_profile"])
    assert result.fields["is_truncated"] is False and result.fields["blur_variance"] > 0
    assert 0 < result.fields["entropy"] <= 8 and len(result.fields["color_mean_rgb"]) == 3
    assert result.fields["fetch_ok"] is True and result.fields["image_format"] == "JPEG"


def test_border_confidence_is_the_reading_s_own_agreement() -> None:
    """Issue 20, item 3: a busy band is art at the edge or a sliver of stack, table or sleeve inside a
    loose quad. A borderless reading from three busy sides of a white card stays below the veto bar
    even on a confident quad; a border all four sides agree on reaches it."""
    spec = PrintingSpec(key="w", set_code="4ED", name="Plague Rats", collector_number="154", lang="en", rarity="C",
                        artist="Anson Maddocks", border_color="white", frame="1993", style="old",
                        released=date(1995, 4, 1), set_size=378, art_seed=5)
    clean = render_face(spec, Variant(height=1000))
    reading = read_border(clean, "trimmed")
    assert (reading.colour, reading.sides_agreeing, reading.agreement) == ("white", 4, 1.0)

    on_stack = np.asarray(clean).copy()
    h, w = on_stack.shape[:2]
    rng = np.random.default_rng(7)
    edge = round(0.075 * w)
    for region in (np.s_[:edge, :], np.s_[:, :edge], np.s_[:, w - edge:]):  # the stack's edges inside the quad
        on_stack[region] = rng.integers(0, 256, on_stack[region].shape, dtype=np.uint8)
    reading = read_border(Image.fromarray(on_stack), "trimmed")
    assert reading.colour == "borderless"
    assert 1.0 * reading.agreement < LAYOUT_CONFIDENCE_BAR  # no veto, whatever the localisation's confidence
