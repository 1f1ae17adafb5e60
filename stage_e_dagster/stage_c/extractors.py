"""The pure extractors of the manifest. Each reads one decoded image and returns its own fields,
or a named skip reason; none touches the database or keeps pixels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from PIL import Image, ImageStat

from .geometry import BleedClass, all_boxes, box_px, classify_bleed, trim_box
from .hashing import phash_int
from .ocr import BottomLinesRead, read_bottom_lines

# Which evidence columns each extractor owns; a recompute of one key rewrites only these.
FIELDS_BY_KEY: dict[str, tuple[str, ...]] = {
    "fetch_health": ("fetch_ok", "fetch_error_class", "fetch_latency_ms", "image_format", "byte_size", "md5",
                     "sha256"),
    "geometry_bleed": ("width", "height", "aspect_ratio", "bleed_class"),
    "layout_class": ("layout_class",),
    "crop_coordinates": ("crops",),
    "collector_line_ocr": ("collector_line_raw_text", "collector_set_code", "collector_number",
                           "collector_language"),
    "collector_line_word_boxes": ("collector_word_boxes",),
    "artist_ocr": ("artist_raw_text", "artist_name", "illus_anchor_fired"),
    "symbol_region": ("symbol_phash",),
    "art_phash": ("art_phash",),
    "legal_line": ("legal_raw_text", "copyright_year", "proxy_marker"),
    "quality_signals": ("is_truncated", "blur_variance", "entropy"),
    "color_profile": ("color_mean_rgb", "color_stddev_rgb"),
}

Outcome = tuple[dict[str, Any], str | None]


@dataclass
class ImageContext:
    """One decoded image and what several extractors share, computed at most once."""

    image: Image.Image
    lexicon: frozenset[str] | None
    _read: BottomLinesRead | None = field(default=None, repr=False)

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size

    @property
    def bleed_class(self) -> BleedClass | None:
        return classify_bleed(*self.size)

    def box(self, name: str) -> tuple[int, int, int, int]:
        return box_px(name, *self.size, self.bleed_class)

    @property
    def face_height(self) -> int:
        left, top, right, bottom = trim_box(*self.size, self.bleed_class)
        return bottom - top

    @property
    def ocr_attempts(self) -> int:
        return self._read.attempts if self._read is not None else 0

    def bottom_lines(self) -> BottomLinesRead:
        if self._read is None:
            self._read = read_bottom_lines(self.image.crop(self.box("bottom_lines")), self.face_height, self.lexicon)
        return self._read


def geometry_bleed(ctx: ImageContext) -> Outcome:
    width, height = ctx.size
    bleed = ctx.bleed_class
    fields = {"width": width, "height": height, "aspect_ratio": round(width / height, 5), "bleed_class": bleed}
    return fields, None if bleed else "ambiguous"


def _edge_bands(image: Image.Image) -> list[np.ndarray]:
    arr = np.asarray(image, dtype=np.float32)
    h, w = arr.shape[:2]
    t = max(2, round(min(w, h) * 0.015))
    inset_x, inset_y = round(w * 0.1), round(h * 0.1)
    return [
        arr[:t, inset_x:w - inset_x].reshape(-1, 3), arr[h - t:, inset_x:w - inset_x].reshape(-1, 3),
        arr[inset_y:h - inset_y, :t].reshape(-1, 3), arr[inset_y:h - inset_y, w - t:].reshape(-1, 3),
    ]


def classify_border(image: Image.Image) -> str | None:
    """Border colour from the four edge bands: black, white, silver, borderless, or None when unclear."""
    bands = _edge_bands(image)
    means = np.array([b.mean(axis=0) for b in bands])
    spread = max(float(b.std(axis=0).mean()) for b in bands)
    if spread > 28 or float(np.ptp(means.mean(axis=1))) > 40:
        return "borderless"
    rgb = means.mean(axis=0)
    brightness = float(rgb.mean())
    saturation = float(rgb.max() - rgb.min())
    if brightness <= 60:
        return "black"
    if brightness >= 210:
        return "white"
    if 130 <= brightness <= 200 and saturation <= 25:
        return "silver"
    return None


def layout_class(ctx: ImageContext) -> Outcome:
    border = classify_border(ctx.image)
    return {"layout_class": border}, None if border else "ambiguous"


def crop_coordinates(ctx: ImageContext) -> Outcome:
    return {"crops": all_boxes(*ctx.size, ctx.bleed_class)}, None


def collector_line_ocr(ctx: ImageContext) -> Outcome:
    read = ctx.bottom_lines()
    parse = read.collector
    fields = {
        "collector_line_raw_text": read.raw_text[:2000],
        "collector_set_code": parse.set_code[:16] if parse.set_code else None,
        "collector_number": parse.collector_number[:16] if parse.collector_number else None,
        "collector_language": parse.language,
    }
    if parse.collector_number is None:
        # Nothing of a collector block (old frames print none) is "no-text"; a partial block is "ambiguous".
        return fields, "ambiguous" if parse.set_code else "no-text"
    return fields, None


def collector_line_word_boxes(ctx: ImageContext) -> Outcome:
    read = ctx.bottom_lines()
    boxes = [
        {"text": w.text, "left": w.left, "top": w.top, "width": w.width, "height": w.height, "conf": w.conf}
        for w in read.words
    ]
    return {"collector_word_boxes": boxes}, None if boxes else "no-text"


def artist_ocr(ctx: ImageContext) -> Outcome:
    read = ctx.bottom_lines()
    fields = {"artist_raw_text": read.left_text[:2000] if not read.illus_anchor else read.raw_text[:2000],
              "artist_name": read.artist_name, "illus_anchor_fired": read.illus_anchor}
    return fields, None if read.artist_name else "no-text"


def symbol_region(ctx: ImageContext) -> Outcome:
    left, top, right, bottom = ctx.box("symbol")
    if right - left < 4 or bottom - top < 4:
        return {"symbol_phash": None}, "ambiguous"
    return {"symbol_phash": phash_int(ctx.image.crop((left, top, right, bottom)))}, None


def art_phash_extractor(ctx: ImageContext) -> Outcome:
    return {"art_phash": phash_int(ctx.image.crop(ctx.box("art")))}, None


def legal_line(ctx: ImageContext) -> Outcome:
    read = ctx.bottom_lines()
    fields = {"legal_raw_text": read.legal_text[:2000], "copyright_year": read.copyright_year,
              "proxy_marker": read.proxy_marker}
    return fields, None if read.copyright_year or read.proxy_marker else "no-text"


def laplacian_variance(gray: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian: low on blurred images."""
    g = gray.astype(np.float32)
    lap = 4 * g[1:-1, 1:-1] - g[:-2, 1:-1] - g[2:, 1:-1] - g[1:-1, :-2] - g[1:-1, 2:]
    return float(lap.var())


def quality_signals(ctx: ImageContext) -> Outcome:
    gray = ctx.image.convert("L")
    w, h = gray.size
    interior = np.asarray(gray)[round(h * 0.05):round(h * 0.95), round(w * 0.05):round(w * 0.95)]
    return {"is_truncated": False, "blur_variance": round(laplacian_variance(interior), 3),
            "entropy": round(float(gray.entropy()), 5)}, None


def color_profile(ctx: ImageContext) -> Outcome:
    stat = ImageStat.Stat(ctx.image)
    return {"color_mean_rgb": [round(v, 3) for v in stat.mean],
            "color_stddev_rgb": [round(v, 3) for v in stat.stddev]}, None


# Image extractors in manifest order; fetch_health is filled from the fetch itself.
IMAGE_EXTRACTORS: dict[str, Callable[[ImageContext], Outcome]] = {
    "geometry_bleed": geometry_bleed,
    "layout_class": layout_class,
    "crop_coordinates": crop_coordinates,
    "collector_line_ocr": collector_line_ocr,
    "collector_line_word_boxes": collector_line_word_boxes,
    "artist_ocr": artist_ocr,
    "symbol_region": symbol_region,
    "art_phash": art_phash_extractor,
    "legal_line": legal_line,
    "quality_signals": quality_signals,
    "color_profile": color_profile,
}

# Extractor groups the benchmark reports separately.
EXTRACTOR_GROUPS: dict[str, tuple[str, ...]] = {
    "geometry": ("geometry_bleed", "layout_class", "crop_coordinates"),
    "ocr": ("collector_line_ocr", "collector_line_word_boxes", "artist_ocr", "legal_line"),
    "hashes": ("symbol_region", "art_phash"),
    "signals": ("quality_signals", "color_profile"),
}
