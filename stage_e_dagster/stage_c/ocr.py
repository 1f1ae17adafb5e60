"""Tesseract reads of the printed bottom lines, with tiered preprocessing and an early stop.

One read of the full-width bottom band serves the collector line, the artist credit and the
legal line, so most cards cost a single Tesseract call. Later tiers run only when the first read
gives no usable collector line. Reads go through the Tesseract API in this process (tesserocr),
one engine per thread, reused for every read: starting a ``tesseract`` process per read cost
more than the read itself.
"""

from __future__ import annotations

import glob
import os
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal, Mapping

import numpy as np
from PIL import Image, ImageFilter, ImageOps

from .parse import (
    NUMBER_SLASH,
    SET_CODE_DIRECT,
    CollectorParse,
    copyright_line_number,
    parse_artist,
    parse_artist_after_language,
    parse_collector_lines,
    parse_legal,
)

# Upscale so the small type reaches about this many pixels per font size; Tesseract reads best near 30-40 px.
TARGET_FONT_PX = 40.0
# Printed type is 1.5-2% of the card height; the middle of that range sets the upscale.
EXPECTED_FONT_FRAC = 0.0175
# Sauvola's weight of the local spread (the usual 0.2): higher thins strokes ("Illus." read as "Itus.").
SAUVOLA_K = 0.2
# Ink is at least this many grey levels darker than its neighbourhood's mean: flat or smoothly
# shaded ground, where Sauvola's cut alone marks the darkest pixels as ink, stays blank.
LOCAL_MIN_CONTRAST = 12.0
# Keep Tesseract to one thread: parallelism comes from running cards side by side. Set before
# tesserocr is first imported (in ``_engine``), as OpenMP reads it when the library loads.
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

if TYPE_CHECKING:
    from tesserocr import PyResultIterator, PyTessBaseAPI

LANGUAGE = "eng"
# Where Debian's tesseract-ocr-eng puts the language data (the folder name is the major version).
DEBIAN_TESSDATA = "/usr/share/tesseract-ocr/*/tessdata"


class TessdataNotFound(RuntimeError):
    """Tesseract has no language data to start with: a configuration problem of the host, not of a card."""


@dataclass(frozen=True)
class OcrWord:
    text: str
    left: int
    top: int
    width: int
    height: int
    conf: float
    line: tuple[int, int, int]


@dataclass
class BottomLinesRead:
    """Everything read from the bottom band, with the attempt that produced it."""

    collector: CollectorParse
    raw_text: str
    left_text: str
    words: list[OcrWord]
    attempts: int
    tier: str
    artist_name: str | None
    illus_anchor: bool
    copyright_year: int | None
    proxy_marker: bool
    legal_text: str
    texts: list[str] = field(default_factory=list)


def _version_key(folder: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", folder.parent.name))


def find_tessdata(environ: Mapping[str, str] = os.environ, probe: str = DEBIAN_TESSDATA) -> Path:
    """The folder holding ``eng.traineddata``: ``TESSDATA_PREFIX`` when set (the folder itself, or its
    parent, as Tesseract 3 read it), else the newest Debian install found by ``probe``.

    A ``TESSDATA_PREFIX`` that holds no data is an error, not a reason to look elsewhere: whoever set
    it meant that data.
    """
    prefix = environ.get("TESSDATA_PREFIX")
    if prefix:
        candidates = [Path(prefix), Path(prefix) / "tessdata"]
        looked = f"TESSDATA_PREFIX={prefix}"
    else:
        candidates = sorted((Path(p) for p in glob.glob(probe)), key=_version_key, reverse=True)
        looked = probe
    for folder in candidates:
        if (folder / f"{LANGUAGE}.traineddata").is_file():
            return folder
    raise TessdataNotFound(
        f"no {LANGUAGE}.traineddata under {looked}: install tesseract-ocr-{LANGUAGE} (scripts/setup.sh) "
        "or point TESSDATA_PREFIX at the folder that holds it"
    )


_engines = threading.local()


def _engine() -> PyTessBaseAPI:
    """This thread's Tesseract engine, started on first use. An engine is not safe to share between
    threads; tesserocr releases the GIL while it reads, so threads still read in parallel."""
    api = getattr(_engines, "api", None)
    if api is None:
        import tesserocr

        tessdata = find_tessdata()
        try:
            # LSTM only (what the CLI's default picks for this data): the legacy engine's adaptive
            # classifier learns from every page, and a reused engine would then read by its history.
            api = tesserocr.PyTessBaseAPI(path=str(tessdata), lang=LANGUAGE, psm=tesserocr.PSM.SINGLE_BLOCK,
                                          oem=tesserocr.OEM.LSTM_ONLY)
        except RuntimeError as exc:  # a file is there but Tesseract cannot load it
            raise TessdataNotFound(f"Tesseract could not load {LANGUAGE} from {tessdata}: {exc}") from exc
        # The crops are prepared dark-on-light; Tesseract's own inverted retry only finds noise.
        api.SetVariable("tessedit_do_invert", "0")
        _engines.api = api
    return api


def tesseract_words(image: Image.Image, psm: int) -> list[OcrWord]:
    """One Tesseract read in page segmentation mode ``psm``; words with their boxes and confidence,
    numbered by block, paragraph and line as Tesseract's TSV output numbers them, blanks dropped."""
    gray = image if image.mode == "L" else image.convert("L")
    if gray.width == 0 or gray.height == 0:
        return []
    api = _engine()
    if api.GetPageSegMode() != psm:
        api.SetPageSegMode(psm)
    # Raw bytes carry no resolution, so Tesseract estimates it from the text, as it does for a PNG file.
    api.SetImageBytes(gray.tobytes(), gray.width, gray.height, 1, gray.width)
    api.Recognize()
    iterator = api.GetIterator()
    return [] if iterator is None else _words(iterator)


def _words(iterator: PyResultIterator) -> list[OcrWord]:
    from tesserocr import RIL

    words: list[OcrWord] = []
    block = par = line = 0
    while True:
        if not iterator.Empty(RIL.WORD):
            if iterator.IsAtBeginningOf(RIL.BLOCK):
                block, par, line = block + 1, 0, 0
            if iterator.IsAtBeginningOf(RIL.PARA):
                par, line = par + 1, 0
            if iterator.IsAtBeginningOf(RIL.TEXTLINE):
                line += 1
            text = (iterator.GetUTF8Text(RIL.WORD) or "").strip()
            if text:
                left, top, right, bottom = iterator.BoundingBox(RIL.WORD)
                words.append(OcrWord(text=text, left=left, top=top, width=right - left, height=bottom - top,
                                     conf=round(float(iterator.Confidence(RIL.WORD)), 3),
                                     line=(block, par, line)))
        if not iterator.Next(RIL.WORD):
            return words


Polarity = Literal["auto", "flip"]


def _dark_text(gray: Image.Image, polarity: Polarity = "auto") -> Image.Image:
    """Tesseract wants dark text on a light ground: invert crops whose ground is dark. The guess
    from the median fails where a dark border fills much of the band under text printed dark on a
    mid-tone frame (a blue 2012 card), so ``flip`` takes the other polarity."""
    arr = np.asarray(gray)
    invert = bool(np.median(arr) < 128) != (polarity == "flip")
    return ImageOps.invert(gray) if invert else gray


def _otsu(gray: Image.Image) -> int:
    """The global Otsu cut: levels above it are ground. A band of one level (a solid colour) has
    nothing to separate, so all of it is ground."""
    hist = np.asarray(gray.histogram(), dtype=np.float64)
    present = np.flatnonzero(hist)
    if present.size < 2:
        return int(present[0]) - 1 if present.size else 0
    total = hist.sum()
    levels = np.arange(256)
    weight = np.cumsum(hist)
    mean = np.cumsum(hist * levels)
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mean[-1] * weight / total - mean) ** 2 / (weight * (total - weight))
    return int(np.nanargmax(between))


def _window_mean(values: np.ndarray, radius: int) -> np.ndarray:
    """Mean over the (2r+1)-square around each pixel, edges repeated, from one integral image."""
    size = 2 * radius + 1
    padded = np.pad(values, radius, mode="edge")
    integral = np.pad(padded.cumsum(axis=0).cumsum(axis=1), ((1, 0), (1, 0)))
    window = integral[size:, size:] - integral[:-size, size:] - integral[size:, :-size] + integral[:-size, :-size]
    return window / (size * size)


def _sauvola(gray: Image.Image, radius: int, k: float = SAUVOLA_K) -> Image.Image:
    """Sauvola's local threshold: each pixel is cut against the mean and spread of its neighbourhood,
    so text stays readable where the ground's brightness drifts (foil, rainbow, glare), which a
    single global cut turns into solid black or white."""
    arr = np.asarray(gray, dtype=np.float64)
    mean = _window_mean(arr, radius)
    spread = np.sqrt(np.maximum(_window_mean(arr * arr, radius) - mean * mean, 0.0))
    cut = mean * (1.0 + k * (spread / 128.0 - 1.0))
    text = (arr <= cut) & (mean - arr >= LOCAL_MIN_CONTRAST)
    return Image.fromarray(np.where(text, 0, 255).astype(np.uint8))


def upscale_factor(face_height: int, extra: float = 1.0) -> float:
    return max(1.0, TARGET_FONT_PX / (EXPECTED_FONT_FRAC * face_height)) * extra


Threshold = Literal["otsu", "local"] | None


def prepare(crop: Image.Image, face_height: int, *, extra_scale: float = 1.0, threshold: Threshold = "otsu",
            sharpen: bool = False, polarity: Polarity = "auto") -> Image.Image:
    """Grayscale, dark-on-light, upscaled, contrast-stretched crop, binarised by one global Otsu cut,
    by a local (Sauvola) cut, or not at all (``threshold`` None)."""
    gray = _dark_text(crop.convert("L"), polarity)
    scale = upscale_factor(face_height, extra_scale)
    if scale != 1.0:
        gray = gray.resize((round(gray.width * scale), round(gray.height * scale)), Image.Resampling.BICUBIC)
    if sharpen:
        gray = gray.filter(ImageFilter.UnsharpMask(radius=2, percent=150, threshold=2))
    gray = ImageOps.autocontrast(gray, cutoff=1)
    if threshold == "otsu":
        cut = _otsu(gray)
        gray = gray.point(lambda v: 255 if v > cut else 0)
    elif threshold == "local":
        # A neighbourhood about two glyphs wide: wide enough to hold ground around every stroke.
        gray = _sauvola(gray, radius=round(TARGET_FONT_PX * extra_scale))
    return gray


# (name, extra upscale, threshold, sharpen, psm, polarity), tried in order until one gives a usable
# collector line. The local tier follows the two reads that serve most cards, so they read as before;
# it is the one that reads foil, where both the global cut and Tesseract's own (also global)
# binarisation fail. Its flipped twin reads dark text on a mid-tone frame above a black border.
TIERS: tuple[tuple[str, float, Threshold, bool, int, Polarity], ...] = (
    ("otsu", 1.0, "otsu", False, 6, "auto"),
    ("gray", 1.0, None, False, 6, "auto"),
    ("local", 1.0, "local", False, 6, "auto"),
    ("local-flip", 1.0, "local", False, 6, "flip"),
    ("sharp-large", 1.5, "otsu", True, 6, "auto"),
    ("sparse", 1.0, None, False, 11, "auto"),
)


def _attempts(crop: Image.Image, face_height: int) -> Iterator[tuple[str, list[OcrWord], int]]:
    for name, extra, threshold, sharpen, psm, polarity in TIERS:
        prepared = prepare(crop, face_height, extra_scale=extra, threshold=threshold, sharpen=sharpen,
                           polarity=polarity)
        yield name, tesseract_words(prepared, psm), prepared.width


def _lines(words: list[OcrWord], split_x: float | None) -> list[str]:
    """Text per Tesseract line, left of ``split_x`` only when given."""
    lines: dict[tuple[int, int, int], list[OcrWord]] = {}
    for word in words:
        if split_x is None or word.left < split_x:
            lines.setdefault(word.line, []).append(word)
    ordered = sorted(lines.values(), key=lambda ws: min(w.top for w in ws))
    return [" ".join(w.text for w in sorted(ws, key=lambda w: w.left)) for ws in ordered]


def _usable(parse: CollectorParse, lexicon: frozenset[str] | None) -> bool:
    """A confident collector read, worth stopping the tiers for.

    A bare number (no ``/set size``, no rarity letter) is what junk from the frame edge reads like,
    so it stops the tiers only beside a set code read as printed and known to the lexicon.
    """
    if parse.collector_number is None or not parse.number_complete:
        return False
    if parse.number_is_weak and not (parse.set_code_known and parse.set_code_source == SET_CODE_DIRECT):
        return False
    return parse.set_code is None or lexicon is None or parse.set_code_known


def _score(read: BottomLinesRead) -> tuple[int, float]:
    """How much of the collector line a read that failed the stop rule still found, then how sure
    Tesseract was of the words holding the number (mean confidence, 0 when none)."""
    parse = read.collector
    found = (2 * (parse.collector_number is not None) + parse.set_code_known + parse.number_complete
             + (parse.collector_number is not None and not parse.number_is_weak))
    number = parse.collector_number
    confs = [w.conf for w in read.words if w.conf >= 0 and number in w.text] if number else []
    return found, (sum(confs) / len(confs) if confs else 0.0)


def read_bottom_lines(band: Image.Image, face_height: int, lexicon: frozenset[str] | None,
                      *, max_attempts: int = len(TIERS)) -> BottomLinesRead:
    """Read the bottom band: stop at the first attempt with a usable collector line, or at an
    ``Illus.`` credit (old frames print no collector number)."""
    best: BottomLinesRead | None = None
    texts: list[str] = []
    for attempt, (tier, words, width) in enumerate(_attempts(band, face_height), start=1):
        all_lines = _lines(words, None)
        left_lines = _lines(words, width * 0.52)
        full_text = "\n".join(all_lines)
        left_text = "\n".join(left_lines)
        texts.append(full_text)
        collector = parse_collector_lines(left_text, lexicon)
        if collector.collector_number is None or collector.number_is_weak:
            # 2008-2014 frames print the number at the end of the centred copyright line instead
            # (a bare number in the collector block's place is then a stray glyph of the credit).
            number = copyright_line_number(full_text)
            if number is not None:
                collector = replace(collector, collector_number=number, number_source=NUMBER_SLASH,
                                    number_complete=True)
        artist, illus = parse_artist(full_text)
        if artist is None:
            for line in left_lines:
                artist = parse_artist_after_language(line)
                if artist:
                    break
        year, proxy = parse_legal(full_text)
        legal_lines = [ln for ln in _lines([w for w in words if w.left >= width * 0.3], None)]
        read = BottomLinesRead(
            collector=collector, raw_text=full_text, left_text=left_text, words=words, attempts=attempt,
            tier=tier, artist_name=artist, illus_anchor=illus, copyright_year=year, proxy_marker=proxy,
            legal_text="\n".join(legal_lines), texts=texts,
        )
        if best is None or _score(read) > _score(best):
            best = read
        if _usable(collector, lexicon):
            return read
        if collector.collector_number is None and collector.set_code is None and (illus or (year and attempt >= 2)):
            # An old frame: the credit (or, on a second read, the copyright line) reads cleanly
            # and there is no collector block at all, so further reads would find nothing more.
            return read
        if attempt >= max_attempts:
            break
    assert best is not None
    # No read passed the stop rule: keep the one that found most (the earliest among equals).
    best.attempts = len(texts)
    best.texts = texts
    return best


# The title is set larger than the bottom lines; Tesseract reads a line best near this height.
TITLE_LINE_PX = 40.0
# Title words read with less confidence than this are left out: the bar's frame and foil read as
# low-confidence junk, and a junk "name" must neither agree nor disagree with the upload's.
TITLE_WORD_CONFIDENCE = 70.0


@dataclass(frozen=True)
class TitleRead:
    text: str            # the confident words, in order ("" when none)
    confidence: float | None  # their mean Tesseract confidence


def read_title(crop: Image.Image) -> TitleRead:
    """The card's name from its title bar: a local (Sauvola) cut first, then the plain grey crop, then
    the local cut of the inverted crop (light type on a dark bar), each read as one line (psm 7);
    the first read with confident words wins. The polarity is not guessed from the median: the
    bar's dark frame lines pull it below the middle on ordinary dark-on-light titles."""
    gray = ImageOps.autocontrast(crop.convert("L"), cutoff=1)
    # The crop's height is about twice the type's: bring the line to Tesseract's size.
    scale = TITLE_LINE_PX / max(1.0, gray.height * 0.55)
    if gray.height and abs(scale - 1.0) > 0.05:
        gray = gray.resize((max(1, round(gray.width * scale)), max(1, round(gray.height * scale))),
                           Image.Resampling.LANCZOS)
    radius = round(TITLE_LINE_PX)
    for prepared in (_sauvola(gray, radius), gray, _sauvola(ImageOps.invert(gray), radius)):
        words = [w for w in tesseract_words(prepared, 7) if w.conf >= TITLE_WORD_CONFIDENCE]
        if words:
            return TitleRead(" ".join(w.text for w in words)[:200], round(sum(w.conf for w in words) / len(words), 3))
    return TitleRead("", None)
