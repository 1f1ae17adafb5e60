"""Card localisation on photo-like uploads: rendered cards pasted onto a table, a top-loader or a
sleeve, tilted, turned, small in the frame; and on the eight real photos when they are present."""

from __future__ import annotations

import csv
import io
import math
import random
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter

from stage_e_dagster.corpus.catalogue import PrintingSpec, build_catalogue
from stage_e_dagster.corpus.render import Variant, render_card, render_face
from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.decode import decode_image
from stage_e_dagster.stage_c.extractors import ImageContext, collector_line_ocr
from stage_e_dagster.stage_c.localise import CONFIDENCE_BAR, localise_card

SETS, SPECS = build_catalogue(random.Random(11), 80)
LEXICON = frozenset(s.code.lower() for s in SETS)
REAL_PHOTOS = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real-photos"


def _background(kind: str, size: tuple[int, int], seed: int) -> Image.Image:
    """A wood-like table, or a sleeve / top-loader surround, as a photo shows it."""
    w, h = size
    rng = np.random.default_rng(seed)
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    grain = np.sin(x / 9.0 + 3 * np.sin(y / 40.0)) * 18 + rng.normal(0, 6, (h, w))
    base = np.array({"table": (120, 82, 50), "toploader": (200, 200, 205), "sleeve": (60, 70, 140)}[kind],
                    dtype=np.float32)
    arr = base[None, None, :] + grain[:, :, None] * (1.0 if kind == "table" else 0.3)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def _photo(p: PrintingSpec, *, kind: str, tilt: float, turn: int, fill: float, bleed: bool = False,
           seed: int = 0) -> tuple[Image.Image, np.ndarray]:
    """The card rendered, framed as ``kind``, turned by ``turn`` quarter degrees and ``tilt`` degrees
    (clockwise), its long side ``fill`` of the frame's. Returns the image and the true card corners
    (card top-left, top-right, bottom-right, bottom-left)."""
    card = render_card(p, Variant(height=900, bleed=bleed), noise_seed=seed).convert("RGBA")
    cw, ch = card.size
    if kind == "toploader":  # a 3 x 4 inch rigid holder around a 2.5 x 3.5 inch card, with its own edge
        mx, my = round(cw * 0.105), round(ch * 0.077)
        plate = Image.new("RGBA", (cw + 2 * mx, ch + 2 * my), (215, 218, 222, 255))
        ImageDraw.Draw(plate).rectangle((2, 2, plate.width - 3, plate.height - 3), outline=(150, 150, 160, 255),
                                        width=3)
        plate.paste(card, (mx, my))
        card, offset = plate, (float(mx), float(my))
    elif kind == "sleeve":  # a coloured sleeve with a thin margin and a glare stripe
        plate = Image.new("RGBA", (cw + 24, ch + 40), (40, 50, 120, 255))
        plate.paste(card, (12, 28))
        glare = Image.new("RGBA", plate.size, (0, 0, 0, 0))
        ImageDraw.Draw(glare).polygon([(0, 200), (plate.width, 60), (plate.width, 120), (0, 260)],
                                      fill=(255, 255, 255, 50))
        card, offset = Image.alpha_composite(plate, glare), (12.0, 28.0)
    else:
        offset = (0.0, 0.0)
    corners = np.array([[offset[0], offset[1]], [offset[0] + cw, offset[1]], [offset[0] + cw, offset[1] + ch],
                        [offset[0], offset[1] + ch]])
    angle = turn + tilt
    rotated = card.rotate(-angle, resample=Image.Resampling.BICUBIC, expand=True)
    # Where the corners went: PIL turns about the centre and then shifts into the expanded frame.
    centre = np.array(card.size, dtype=np.float64) / 2
    rad = math.radians(angle)
    rot = np.array([[math.cos(rad), -math.sin(rad)], [math.sin(rad), math.cos(rad)]])
    corners = (corners - centre) @ rot.T + np.array(rotated.size) / 2
    frame_long = max(rotated.size) / fill
    frame = (round(frame_long * 0.75), round(frame_long)) if turn % 180 == 0 else (round(frame_long),
                                                                                   round(frame_long * 0.75))
    frame = (max(frame[0], rotated.width + 4), max(frame[1], rotated.height + 4))
    photo = _background("table", frame, seed).convert("RGBA")
    at = ((frame[0] - rotated.width) // 2, (frame[1] - rotated.height) // 2)
    photo.alpha_composite(rotated, at)
    photo = photo.convert("RGB").filter(ImageFilter.GaussianBlur(0.6))
    return photo, corners + np.array(at)


def _jpeg(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=88)
    return buf.getvalue()


def _modern(k: int) -> PrintingSpec:
    return [p for p in SPECS if p.style in ("slash", "rarity")][k]


# Known gap, kept as a strict expected failure so a fix shows: a glare stripe across a sleeve
# splits the card's outline.
_GLARE = pytest.mark.xfail(strict=True, reason="the outline is split by a glare stripe across the sleeve")

CASES = [
    # kind, tilt, quarter turn, fill, bleed
    ("table", 0.0, 0, 0.85, False),
    ("table", 12.0, 0, 0.7, False),
    ("table", -20.0, 0, 0.6, False),
    ("table", 18.0, 0, 0.8, False),
    ("toploader", 8.0, 0, 0.8, False),
    pytest.param("sleeve", -6.0, 0, 0.75, False, marks=_GLARE),
    ("table", 5.0, 90, 0.8, False),
    ("table", -10.0, 180, 0.75, False),
    ("toploader", 0.0, 270, 0.7, False),
    ("table", 15.0, 0, 0.55, True),
    ("table", 3.0, 180, 0.9, False),
]


@pytest.mark.parametrize(("kind", "tilt", "turn", "fill", "bleed"), CASES)
def test_card_is_found_and_read_through_the_real_stage_c_path(kind: str, tilt: float, turn: int, fill: float,
                                                               bleed: bool) -> None:
    p = _modern(round(abs(tilt)) + turn // 90 + (3 if bleed else 0))
    photo, truth = _photo(p, kind=kind, tilt=tilt, turn=turn, fill=fill, bleed=bleed, seed=3)
    found = localise_card(photo)
    assert found.method == "contour" and found.confidence >= CONFIDENCE_BAR
    assert found.rotation == (360 - turn) % 360
    assert abs(found.tilt_deg - tilt) <= 2.0
    card_h = float(np.linalg.norm(truth[3] - truth[0]))
    errors = np.linalg.norm(np.array(found.quad) - truth, axis=1)
    assert errors.max() <= 0.02 * card_h, errors
    assert found.bleed_class == ("bleed" if bleed else "trimmed")

    result = compute_evidence("h", _jpeg(photo), latency_ms=1.0, lexicon=LEXICON)
    assert result.fields["localisation_method"] == "contour"
    assert result.fields["collector_number"] == p.collector_number
    assert result.fields["collector_set_code"] == p.set_code.lower()
    assert result.fields["layout_class"] == p.border_color
    # A borderless reading (busy bands: art at the edge, or a sliver of background) weighs 0.55 of a
    # coloured one (issue 20, item 3): on this quad it is kept, below the veto bar.
    floor = CONFIDENCE_BAR * (0.55 * 0.9 if p.border_color == "borderless" else 1.0)
    assert result.fields["layout_confidence"] >= floor
    assert (result.fields["width"], result.fields["height"]) == photo.size  # geometry describes the source


def test_a_render_is_the_whole_image() -> None:
    p = _modern(0)
    for bleed in (False, True):
        image = render_card(p, Variant(height=1000, bleed=bleed))
        found = localise_card(image)
        assert (found.method, found.rotation, found.bleed_class) == ("whole-image", 0, "bleed" if bleed else "trimmed")
        assert found.card.size == image.size


def test_the_text_is_read_where_it_is_whether_or_not_the_card_was_found() -> None:
    """Issue 30: the reader reads the upload where its text is; the localisation no longer decides
    what gets read (the bottom band cut from a wrong quad lost the collector line)."""
    p = _modern(1)
    photo, _ = _photo(p, kind="table", tilt=12.0, turn=0, fill=0.7, seed=3)
    raw = ImageContext(photo, LEXICON)  # no localisation at all: the upload as it is
    assert collector_line_ocr(raw)[0]["collector_number"] == p.collector_number
    localised = ImageContext.from_upload(photo, LEXICON)
    assert collector_line_ocr(localised)[0]["collector_number"] == p.collector_number


@pytest.mark.parametrize("name", ["solid", "noise"])
def test_no_card_falls_back_with_a_named_method(name: str) -> None:
    if name == "solid":
        image = Image.new("RGB", (640, 480), (90, 120, 60))
    else:
        image = Image.fromarray(np.random.default_rng(4).integers(0, 256, (480, 640, 3), dtype=np.uint8))
    found = localise_card(image)
    assert (found.method, found.confidence, found.rotation, found.bleed_class) == ("fallback", 0.0, 0, None)
    assert found.card is image
    result = compute_evidence("h", _jpeg(image), latency_ms=1.0, lexicon=LEXICON)
    assert result.fields["localisation_method"] == "fallback"
    assert result.skip_reasons["card_localisation"] == "no-card-found"
    assert result.skip_reasons["geometry_bleed"] == "ambiguous"
    assert result.fields["layout_confidence"] in (None, 0.0)
    assert not result.terminal  # a named outcome, not a lost card


def test_exif_orientation_is_applied_at_decode() -> None:
    """A phone JPEG stored sideways with Orientation=6 (turn 90 degrees clockwise to view) decodes upright."""
    upright = render_card(_modern(2), Variant(height=600))
    stored = upright.rotate(90, expand=True)  # as the sensor stored it: the card's top to the left
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    stored.save(buf, format="JPEG", quality=92, exif=exif.tobytes())
    assert Image.open(io.BytesIO(buf.getvalue())).getexif().get(0x0112) == 6
    decoded = decode_image(buf.getvalue())
    assert decoded.error is None and decoded.image.size == upright.size
    assert (decoded.width, decoded.height) == upright.size
    diff = np.abs(np.asarray(decoded.image, dtype=np.int16) - np.asarray(upright, dtype=np.int16)).mean()
    assert diff < 8


def _real_rows() -> list[dict[str, str]]:
    labels = REAL_PHOTOS / "labels.csv"
    if not labels.exists():
        return []
    with labels.open(newline="") as handle:
        return list(csv.DictReader(handle))


# Known gap: the two white-bordered cards lie on a stack of white-bordered cards, and the quad
# found runs around the stack's edge too, so the border bands see the stack and the table.
_WHITE_ON_A_STACK = pytest.mark.xfail(strict=True, reason="white card on a stack: the quad includes the stack")


def _real_params() -> list[object]:
    rows = _real_rows()
    if not rows:
        return [pytest.param(None, id="absent")]
    return [pytest.param(r, id=r["file"], marks=[_WHITE_ON_A_STACK] if r["border_color"] == "white" else [])
            for r in rows]


@pytest.mark.parametrize("row", _real_params())
def test_real_photo_card_is_found_and_its_border_read(row: dict[str, str] | None) -> None:
    if row is None:
        pytest.skip(f"real photos absent: {REAL_PHOTOS} (evaluation input, never copied into the project)")
    data = (REAL_PHOTOS / row["file"]).read_bytes()
    result = compute_evidence("h", data, latency_ms=1.0, keys=["card_localisation", "geometry_bleed",
                                                                 "layout_class"])
    assert result.fields["localisation_method"] == "contour"
    assert result.fields["localisation_confidence"] >= CONFIDENCE_BAR
    assert result.fields["localisation_rotation"] == 0
    assert result.fields["bleed_class"] == "trimmed"  # a photographed card has no bleed
    assert result.fields["layout_class"] == row["border_color"]


def test_an_upright_card_the_rules_panel_turned_over_is_turned_back_by_its_text() -> None:
    """Issue 20, item 3: pale plain art over a dark, busy rules box looks like a card upside down to
    the rules-panel cue; the bottom band of the card as found reads nothing, the band of the card
    turned over reads its collector line, so the card is upright after all."""
    spec = PrintingSpec(key="r", set_code="DMU", name="Broodhunter Wurm", collector_number="41", lang="en",
                        rarity="C", artist="Svetlin Velinov", border_color="black", frame="2015", style="slash",
                        released=date(2022, 9, 9), set_size=281, art_seed=3)
    card = render_face(spec, Variant(height=1000))
    w, h = card.size
    ImageDraw.Draw(card).rectangle((round(0.075 * w), round(0.11 * h), round(0.925 * w), round(0.555 * h)),
                                   fill=(238, 234, 224))
    rng = np.random.default_rng(3)
    arr = np.asarray(card).copy()
    y0, y1, x0, x1 = round(0.626 * h), round(0.872 * h), round(0.07 * w), round(0.93 * w)
    arr[y0:y1, x0:x1] = (rng.integers(0, 90, (y1 - y0, x1 - x0, 1)) + np.array([40, 10, 80])).astype(np.uint8)
    photo = _background("table", (1000, 1300), 3)
    photo.paste(Image.fromarray(arr), (140, 150))

    assert localise_card(photo).rotation == 180  # the panel cue alone turns it over
    result = compute_evidence("h", _jpeg(photo), latency_ms=1.0, lexicon=frozenset({"dmu"}))
    assert result.fields["localisation_rotation"] == 0
    assert (result.fields["collector_number"], result.fields["collector_set_code"]) == ("41", "dmu")
