"""Tesseract reads of the printed bottom lines, with tiered preprocessing and an early stop.

One read of the full-width bottom band serves the collector line, the artist credit and the
legal line, so most cards cost a single Tesseract call. Later tiers run only when the first read
gives no usable collector line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pytesseract
from PIL import Image, ImageFilter, ImageOps

from .parse import CollectorParse, parse_artist, parse_artist_after_language, parse_collector_lines, parse_legal

# Upscale so the small type reaches about this many pixels per font size; Tesseract reads best near 30-40 px.
TARGET_FONT_PX = 40.0
# Printed type is 1.5-2% of the card height; the middle of that range sets the upscale.
EXPECTED_FONT_FRAC = 0.0175
# Keep Tesseract to one thread: parallelism comes from running cards side by side.
os.environ.setdefault("OMP_THREAD_LIMIT", "1")


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


def tesseract_words(image: Image.Image, psm: int) -> list[OcrWord]:
    """One Tesseract call; words with their boxes and confidence, blanks dropped."""
    data = pytesseract.image_to_data(
        image, config=f"--psm {psm} -c tessedit_do_invert=0", output_type=pytesseract.Output.DICT
    )
    words = []
    for i, text in enumerate(data["text"]):
        if text and text.strip():
            words.append(OcrWord(
                text=text.strip(), left=int(data["left"][i]), top=int(data["top"][i]),
                width=int(data["width"][i]), height=int(data["height"][i]), conf=float(data["conf"][i]),
                line=(int(data["block_num"][i]), int(data["par_num"][i]), int(data["line_num"][i])),
            ))
    return words


def _dark_text(gray: Image.Image) -> Image.Image:
    """Tesseract wants dark text on a light ground: invert crops whose ground is dark."""
    arr = np.asarray(gray)
    return ImageOps.invert(gray) if np.median(arr) < 128 else gray


def _otsu(gray: Image.Image) -> int:
    hist = np.asarray(gray.histogram(), dtype=np.float64)
    total = hist.sum()
    levels = np.arange(256)
    weight = np.cumsum(hist)
    mean = np.cumsum(hist * levels)
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mean[-1] * weight / total - mean) ** 2 / (weight * (total - weight))
    return int(np.nanargmax(between))


def upscale_factor(face_height: int, extra: float = 1.0) -> float:
    return max(1.0, TARGET_FONT_PX / (EXPECTED_FONT_FRAC * face_height)) * extra


def prepare(crop: Image.Image, face_height: int, *, extra_scale: float = 1.0, binarize: bool = True,
            sharpen: bool = False) -> Image.Image:
    """Grayscale, dark-on-light, upscaled, contrast-stretched and (optionally) Otsu-binarised crop."""
    gray = _dark_text(crop.convert("L"))
    scale = upscale_factor(face_height, extra_scale)
    if scale != 1.0:
        gray = gray.resize((round(gray.width * scale), round(gray.height * scale)), Image.Resampling.BICUBIC)
    if sharpen:
        gray = gray.filter(ImageFilter.UnsharpMask(radius=2, percent=150, threshold=2))
    gray = ImageOps.autocontrast(gray, cutoff=1)
    if binarize:
        cut = _otsu(gray)
        gray = gray.point(lambda v: 255 if v > cut else 0)
    return gray


# (name, extra upscale, binarize, sharpen, psm), tried in order until one gives a usable collector line.
TIERS: tuple[tuple[str, float, bool, bool, int], ...] = (
    ("otsu", 1.0, True, False, 6),
    ("gray", 1.0, False, False, 6),
    ("sharp-large", 1.5, True, True, 6),
    ("sparse", 1.0, False, False, 11),
)


def _attempts(crop: Image.Image, face_height: int) -> Iterator[tuple[str, list[OcrWord], int]]:
    for name, extra, binarize, sharpen, psm in TIERS:
        prepared = prepare(crop, face_height, extra_scale=extra, binarize=binarize, sharpen=sharpen)
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
    return parse.collector_number is not None and parse.number_complete and (
        parse.set_code is None or lexicon is None or parse.set_code_known
    )


def _score(read: BottomLinesRead) -> int:
    """How much of the collector line a read that failed the stop rule still found."""
    parse = read.collector
    return 2 * (parse.collector_number is not None) + parse.set_code_known + parse.number_complete


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
