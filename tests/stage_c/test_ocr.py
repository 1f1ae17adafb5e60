"""The in-process Tesseract engine and the thresholds in front of it, on rendered text read by the real Tesseract."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from stage_e_dagster.stage_c import ocr
from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.ocr import (
    TIERS,
    TessdataNotFound,
    find_tessdata,
    prepare,
    read_bottom_lines,
    tesseract_words,
)

FACE_HEIGHT = 1000  # the bands below are drawn at the type size of a 1000 px card
FONT_PX = round(ocr.EXPECTED_FONT_FRAC * FACE_HEIGHT)


def _font() -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=FONT_PX)  # type: ignore[return-value]


def collector_band(lines: tuple[str, str] = ("123/274 R", "ZNR * EN"), *, ground: Image.Image | None = None,
                   ink: int = 20) -> Image.Image:
    """A bottom band with the two collector lines in the card's small type, on ``ground`` (plain light by default)."""
    band = ground.copy() if ground is not None else Image.new("RGB", (420, 3 * FONT_PX + 16), (235, 232, 225))
    draw = ImageDraw.Draw(band)
    for row, text in enumerate(lines):
        draw.text((12, 8 + row * round(FONT_PX * 1.4)), text, font=_font(), fill=(ink, ink, ink))
    return band


def foil_ground(bright: int = 200, dark: int = 30, width: int = 420, height: int = 3 * FONT_PX + 16) -> Image.Image:
    """A foil-like ground: a rainbow whose brightness falls from ``bright`` under the collector block
    to ``dark`` at the far end of the band."""
    x = np.linspace(0.0, 1.0, width)[None, :, None]
    phase = np.array([0.0, 2.1, 4.2])[None, None, :]
    light = bright + (dark - bright) * x
    rgb = light * (0.8 + 0.2 * np.sin(2 * np.pi * 1.5 * x + phase))
    return Image.fromarray(np.broadcast_to(rgb, (height, width, 3)).clip(0, 255).astype(np.uint8))


def _text(image: Image.Image, psm: int = 6) -> str:
    return " ".join(w.text for w in tesseract_words(image, psm))


def test_engine_reads_a_rendered_collector_line_with_boxes_and_confidences() -> None:
    band = prepare(collector_band(), FACE_HEIGHT)
    words = tesseract_words(band, 6)
    assert [w.text for w in words[:2]] == ["123/274", "R"]
    assert "ZNR" in [w.text for w in words]
    first_line = {w.line for w in words[:2]}
    assert len(first_line) == 1 and words[0].line[0] == 1
    assert {w.line for w in words} - first_line, "the second printed line is its own Tesseract line"
    for word in words:
        assert 0 <= word.left < band.width and 0 <= word.top < band.height
        assert word.width > 0 and word.height > 0
        assert word.left + word.width <= band.width and word.top + word.height <= band.height
        assert 0.0 <= word.conf <= 100.0
    assert words[0].conf > 60  # clean type reads with confidence
    # The number's box covers its glyphs: the second word starts to the right of it on the same line.
    assert words[1].left >= words[0].left + words[0].width


def _cli_tsv_words(image: Image.Image, psm: int, folder: Path) -> list[tuple[str, int, int, int, int, tuple]]:
    """What the ``tesseract`` program (main's former reader) prints for the image: its TSV word rows."""
    source = folder / f"band-{psm}.png"
    image.save(source)
    done = subprocess.run(["tesseract", str(source), "stdout", "--psm", str(psm), "-c", "tessedit_do_invert=0",
                           "tsv"], capture_output=True, text=True, check=True)
    rows = list(csv.DictReader(io.StringIO(done.stdout), delimiter="\t", quoting=csv.QUOTE_NONE))
    return [(r["text"].strip(), int(r["left"]), int(r["top"]), int(r["width"]), int(r["height"]),
             (int(r["block_num"]), int(r["par_num"]), int(r["line_num"])))
            for r in rows if r["level"] == "5" and r["text"].strip()]


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="the tesseract program is not installed")
@pytest.mark.parametrize("psm", [6, 11])
def test_words_match_the_tesseract_programs_tsv(psm: int, tmp_path: Path) -> None:
    """Text, boxes and block/paragraph/line numbers are those the TSV output gave the parser before."""
    band = prepare(collector_band(("045/280 C", "DMU * DE")), FACE_HEIGHT)
    words = tesseract_words(band, psm)
    assert [(w.text, w.left, w.top, w.width, w.height, w.line) for w in words] == _cli_tsv_words(band, psm, tmp_path)


def test_one_engine_serves_every_psm_and_reads_the_same_whatever_it_read_before() -> None:
    band = prepare(collector_band(), FACE_HEIGHT)
    block = tesseract_words(band, 6)
    engine = ocr._engine()
    sparse = tesseract_words(band, 11)
    assert ocr._engine() is engine and engine.GetPageSegMode() == 11
    assert "123/274" in [w.text for w in block] and "123/274" in [w.text for w in sparse]
    tesseract_words(prepare(collector_band(("045/280 C", "DMU * DE")), FACE_HEIGHT), 6)
    # Back in the first mode after other reads: the same words, boxes and confidences as the first time.
    assert tesseract_words(band, 6) == block
    assert engine.GetPageSegMode() == 6


def test_each_thread_gets_its_own_engine_and_reads_alike() -> None:
    band = prepare(collector_band(), FACE_HEIGHT)
    expected = _text(band)
    engines: dict[str, object] = {}
    texts: dict[str, str] = {}
    barrier = threading.Barrier(3)

    def read(name: str) -> None:
        barrier.wait()
        engines[name] = ocr._engine()
        texts[name] = " | ".join(_text(band) for _ in range(2))

    threads = [threading.Thread(target=read, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(e) for e in engines.values()}) == 3
    assert ocr._engine() not in engines.values()
    assert texts == {name: f"{expected} | {expected}" for name in engines}


def test_missing_tessdata_is_a_named_error(tmp_path: Path) -> None:
    with pytest.raises(TessdataNotFound, match=r"TESSDATA_PREFIX=.*empty"):
        find_tessdata({"TESSDATA_PREFIX": str(tmp_path / "empty")})
    with pytest.raises(TessdataNotFound, match="no eng.traineddata under"):
        find_tessdata({}, probe=str(tmp_path / "*" / "tessdata"))


def test_tessdata_found_by_prefix_or_by_probing_the_newest(tmp_path: Path) -> None:
    for version in ("4.00", "5"):
        folder = tmp_path / version / "tessdata"
        folder.mkdir(parents=True)
        (folder / "eng.traineddata").write_bytes(b"x")
    assert find_tessdata({}, probe=str(tmp_path / "*" / "tessdata")) == tmp_path / "5" / "tessdata"
    assert find_tessdata({"TESSDATA_PREFIX": str(tmp_path / "4.00")}) == tmp_path / "4.00" / "tessdata"
    assert find_tessdata({"TESSDATA_PREFIX": str(tmp_path / "5" / "tessdata")}) == tmp_path / "5" / "tessdata"


def test_an_engine_on_a_missing_tessdata_is_a_named_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh thread has no engine yet, so it looks for the data and fails with the named error."""
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    raised: list[BaseException] = []

    def read() -> None:
        try:
            tesseract_words(prepare(collector_band(), FACE_HEIGHT), 6)
        except BaseException as exc:  # checked below
            raised.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert len(raised) == 1 and isinstance(raised[0], TessdataNotFound), raised


def test_a_host_without_tessdata_fails_the_read_instead_of_marking_the_card_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing language pack is the host's problem: Stage C must raise it, not store an
    ``extractor-error`` record that would leave every card of the batch done and never retried."""
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    buf = io.BytesIO()
    Image.new("RGB", (630, 880), (250, 250, 250)).save(buf, format="PNG")
    raised: list[BaseException] = []

    def extract() -> None:
        try:
            compute_evidence("h", buf.getvalue(), latency_ms=1.0, keys=["collector_line_ocr"])
        except BaseException as exc:  # checked below
            raised.append(exc)

    thread = threading.Thread(target=extract)  # a fresh thread has no engine yet
    thread.start()
    thread.join()
    assert len(raised) == 1 and isinstance(raised[0], TessdataNotFound), raised


def test_otsu_on_a_uniform_band_binarises_to_plain_ground() -> None:
    """A solid band has nothing to separate: it becomes blank ground, not an error."""
    for level in (0, 128, 255):
        band = Image.new("L", (200, 40), level)
        cut = ocr._otsu(band)
        assert band.point(lambda v: 255 if v > cut else 0).getextrema() == (255, 255)
    assert prepare(Image.new("RGB", (300, 60), (90, 20, 160)), FACE_HEIGHT).getextrema() == (255, 255)


def test_a_solid_colour_image_reads_as_no_text_not_an_extractor_error() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (630, 880), (200, 40, 40)).save(buf, format="PNG")
    result = compute_evidence("h", buf.getvalue(), latency_ms=1.0, keys=["collector_line_ocr", "legal_line"])
    assert result.skip_reasons == {"collector_line_ocr": "no-text", "legal_line": "no-text"}


@pytest.mark.parametrize("bright,dark", [(200, 30), (230, 20), (180, 40)])
def test_local_threshold_reads_white_text_on_foil_that_the_global_cut_wipes_out(bright: int, dark: int) -> None:
    band = collector_band(ground=foil_ground(bright, dark), ink=245)
    assert "123/274" not in _text(prepare(band, FACE_HEIGHT, threshold="otsu"))
    local = _text(prepare(band, FACE_HEIGHT, threshold="local"))
    assert local.startswith("123/274 R ZNR"), local


def test_the_tiers_reach_the_local_threshold_on_foil() -> None:
    band = collector_band(ground=foil_ground(), ink=245)
    read = read_bottom_lines(band, FACE_HEIGHT, frozenset({"znr"}))
    assert (read.tier, read.attempts) == ("local", [name for name, *_ in TIERS].index("local") + 1)
    assert (read.collector.collector_number, read.collector.set_code) == ("123", "znr")
    assert [name for name, *_ in TIERS][:2] == ["otsu", "gray"]  # the reads most cards stop at come first


def test_local_threshold_keeps_plain_ground_blank() -> None:
    """Smooth ground, dark or light, holds no text: the local cut leaves it white, with no speckle."""
    ramp = Image.fromarray(np.tile(np.linspace(0, 255, 400), (80, 1)).astype(np.uint8))
    for ground in (ramp, Image.new("L", (400, 80), 30), Image.new("L", (400, 80), 220)):
        assert ocr._sauvola(ground, radius=40).getextrema() == (255, 255)


def test_dark_text_on_a_mid_tone_frame_above_a_black_border_is_read() -> None:
    """Issue 20: a blue 2012 card's copyright line, dark type on a mid-tone frame with the black
    border under it. The median guessed light-on-dark and inverted it, so every tier read noise;
    the flipped local tier reads the number at the end of the copyright line."""
    width, height = 700, 4 * FONT_PX + 16
    ground = Image.new("RGB", (width, height), (12, 12, 14))
    ImageDraw.Draw(ground).rectangle((0, 0, width, 3 * FONT_PX + 8), fill=(70, 105, 190))
    band = collector_band(("Jaime Jones", "TM & (c) 1993-2012 Wizards of the Coast LLC 68/244"), ground=ground,
                          ink=15)
    read = read_bottom_lines(band, FACE_HEIGHT, frozenset({"avr"}))
    assert read.collector.collector_number == "68", read.raw_text
    assert read.copyright_year == 2012
