"""The set symbol extractor (issue 41 part 2): the glyph at the type line's right end, read from the
localised card without OCR, is ranked first among the sets of its era and wins by the clear margin.

Real photos of 1997-frame cards (``../shared/fixtures/real-photos-2``) and Keyrune's icons
(``../shared/fixtures/set-symbols``, GPL-3.0) are read where they lie; the tests skip without them.
"""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stage_e_dagster.catalog_import.set_symbols import svg_symbol_shape
from stage_e_dagster.corpus.catalogue import PrintingSpec
from stage_e_dagster.corpus.render import Variant, paint_symbol, render_face
from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.localise import localise_card
from stage_e_dagster.stage_c.set_symbol import read_symbol_shape
from stage_e_dagster.stage_d.symbols import rank_symbols, symbol_winner
from tests.set_symbols import SYMBOLS, keyrune_glyph, needs_symbols

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
PHOTOS = SHARED / "real-photos-2"
NO_SYMBOL = ("lea", "leb", "2ed", "3ed", "4ed", "5ed")  # core sets before Sixth Edition print none


def set_shapes(*codes: str) -> dict[str, bytes | None]:
    return {code: None if code in NO_SYMBOL else svg_symbol_shape((SYMBOLS / f"{code}.svg").read_bytes())
            for code in codes}


@needs_symbols
@pytest.mark.parametrize("photo, own, era", [
    ("vis-080_goblin-recruiter.jpg", "vis", ("ice", "chr", "hml", "all", "mir", "5ed", "por", "wth", "tmp", "4ed")),
    ("wth-153_mind-stone_webcam.jpg", "wth", ("all", "mir", "vis", "5ed", "por", "tmp", "sth", "exo", "usg")),
])
def test_an_old_frame_photo_is_placed_by_its_symbol(photo: str, own: str, era: tuple[str, ...]) -> None:
    path = PHOTOS / photo
    if not path.is_file():
        pytest.skip(f"the real photo is not at {path}")
    found = localise_card(Image.open(path).convert("RGB"))
    shape = read_symbol_shape(found.card, found.bleed_class)
    assert shape is not None
    candidates = set_shapes(own, *era)
    assert rank_symbols(shape, candidates)[0][0] == own
    assert symbol_winner(shape, candidates) == own


def ice_age_card(height: int = 1100) -> Image.Image:
    """A rendered card whose type line ends in Ice Age's snowflake, drawn black as commons print it."""
    spec = PrintingSpec(key="ice-1", set_code="ICE", name="Brainstorm", collector_number="1", lang="en", rarity="C",
                        artist="Christopher Rush", border_color="black", frame="1993", style="none",
                        released=date(1995, 6, 3), set_size=383, art_seed=7)
    face = render_face(spec, Variant(height=height, jpeg_quality=None))
    return paint_symbol(face, keyrune_glyph("ice", round(0.042 * face.height)))



@needs_symbols
def test_a_rendered_ice_age_card_ranks_ice_first() -> None:
    shape = read_symbol_shape(ice_age_card())
    assert shape is not None
    candidates = set_shapes("ice", "lea", "4ed", "hml", "fem", "mma", "chr", "all")
    ranking = rank_symbols(shape, candidates)
    assert ranking[0][0] == "ice"
    assert ("lea", None) in ranking and ("4ed", None) in ranking  # looked at, cannot win
    # Homelands' filled glyph is too close to the snowflake for a clear margin; without it, Ice Age wins.
    assert symbol_winner(shape, candidates) is None
    assert symbol_winner(shape, {k: v for k, v in candidates.items() if k != "hml"}) == "ice"


@needs_symbols
def test_the_extractor_stores_the_shape_and_names_a_card_without_a_symbol() -> None:
    buffer = io.BytesIO()
    ice_age_card(900).save(buffer, format="PNG")
    result = compute_evidence("h-ice", buffer.getvalue(), latency_ms=None, keys=["set_symbol"])
    assert result.extractor_versions["set_symbol"] == "set-symbol-v1"
    assert result.skip_reasons["set_symbol"] is None
    assert result.fields["symbol_shape"] == read_symbol_shape(ice_age_card(900))

    blank = Image.fromarray(np.full((880, 630, 3), 200, np.uint8))
    buffer = io.BytesIO()
    blank.save(buffer, format="PNG")
    plain = compute_evidence("h-blank", buffer.getvalue(), latency_ms=None, keys=["set_symbol"])
    assert plain.fields["symbol_shape"] is None and plain.skip_reasons["set_symbol"] == "no-symbol"
