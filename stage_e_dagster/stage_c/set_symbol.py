"""Find the set symbol at the right end of the type line and keep its silhouette.

Most old frames print no collector number; the set symbol tells their printings apart (issue 41). It
sits at the right end of the type line on every frame that prints one, at about the same place on
the localised card in the 1993/1997 frames (a glyph on the coloured frame) and the 2003/2015 ones
(inside the type bar), so one region covers both. The glyph is found as the blob there that differs
most from the type line's own colour: a black symbol, or a rarity-coloured one in its black outline.
No OCR and a crop of about 100 pixels high: a millisecond or two a card.
"""

from __future__ import annotations

import cv2
import numpy as np
from PIL import Image

from ..catalog.symbol_shape import fill_holes, shape_descriptor
from .geometry import BleedClass, trim_box

# Fractions of the trimmed card (left, top, right, bottom). The symbol spans about 0.56-0.61 of the
# height and 0.81-0.94 of the width on the real photos of both frame families.
SYMBOL_SEARCH = (0.77, 0.52, 0.965, 0.65)
TYPE_LINE_BAND = (0.56, 0.60)   # rows whose median colour is the type line's (or old frame's) own
SYMBOL_CENTRE = (0.885, 0.582)  # where a symbol's centre falls
MAX_CENTRE_OFFSET = 0.05        # a blob's centre farther than this (card heights) is not the symbol
GLYPH_HEIGHT = (0.012, 0.06)    # a symbol's height and width in card heights
GLYPH_WIDTH = (0.012, 0.14)
SEARCH_HEIGHT = 96              # pixels the search region is scaled to
MIN_CONTRAST = 45.0             # least colour distance from the type line that can be the glyph
_SQUARE = np.ones((3, 3), np.uint8)


def read_symbol_shape(card: Image.Image, bleed_class: BleedClass | None = None) -> bytes | None:
    """The descriptor (:mod:`~stage_e_dagster.catalog.symbol_shape`) of the symbol on the upright card
    ``card``, or None when no blob there has a symbol's size and place."""
    left, top, right, bottom = trim_box(card.width, card.height, bleed_class)
    tw, th = right - left, bottom - top
    sl, st, sr, sb = SYMBOL_SEARCH
    region = card.crop((left + round(sl * tw), top + round(st * th), left + round(sr * tw), top + round(sb * th)))
    if region.width < 4 or region.height < 4:
        return None
    width = max(4, round(region.width * SEARCH_HEIGHT / region.height))
    pixels = np.asarray(region.convert("RGB").resize((width, SEARCH_HEIGHT), Image.Resampling.BILINEAR),
                        dtype=np.float32)
    glyph = _glyph_mask(pixels, SEARCH_HEIGHT / (sb - st))
    return shape_descriptor(glyph) if glyph is not None else None


def _glyph_mask(pixels: np.ndarray, unit: float) -> np.ndarray | None:
    """The symbol's pixels in the search region; ``unit`` is the card's height in region pixels.

    First as one blob; then, when a thin frame line joins the glyph to the region's edge (the end of a
    modern type bar), as the blob left after one pixel is eroded away, grown back inside the contrast map.
    """
    height = pixels.shape[0]
    b0, b1 = (round((y - SYMBOL_SEARCH[1]) * unit) for y in TYPE_LINE_BAND)
    line_colour = np.median(pixels[b0:b1].reshape(-1, 3), axis=0)
    distance = np.sqrt(((pixels - line_colour) ** 2).sum(axis=-1))
    band = np.clip(distance[b0:b1], 0, 255).astype(np.uint8)
    otsu, _ = cv2.threshold(band, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    contrast = (distance > max(float(otsu), MIN_CONTRAST)).astype(np.uint8)
    centre = ((SYMBOL_CENTRE[0] - SYMBOL_SEARCH[0]) * unit, (SYMBOL_CENTRE[1] - SYMBOL_SEARCH[1]) * unit)
    for erode in (0, 1):
        core = cv2.erode(contrast, _SQUARE, iterations=erode) if erode else contrast
        count, labels, stats, _ = cv2.connectedComponentsWithStats(core, connectivity=8 if not erode else 4)
        best = _symbol_blob(stats, count, centre, unit, erode, (pixels.shape[1], height))
        if best is None:
            continue
        blob = (labels == best).astype(np.uint8)
        if erode:
            x, y, w, h = (int(v) for v in stats[best][:4])
            for other in range(1, count):  # a glyph the erosion split: the pieces inside its box
                ox, oy, ow, oh = (int(v) for v in stats[other][:4])
                if other != best and ox >= x - 1 and oy >= y - 1 and ox + ow <= x + w + 1 and oy + oh <= y + h + 1:
                    blob |= (labels == other).astype(np.uint8)
            blob = cv2.dilate(blob, _SQUARE, iterations=erode + 1) & contrast
        return fill_holes(cv2.morphologyEx(blob, cv2.MORPH_CLOSE, _SQUARE))
    return None


def _symbol_blob(stats: np.ndarray, count: int, centre: tuple[float, float], unit: float, erode: int,
                 size: tuple[int, int]) -> int | None:
    """The label of the blob of a symbol's size, clear of the region's edges, nearest where symbols sit."""
    width, height = size
    best: tuple[float, int] | None = None
    for label in range(1, count):
        x, y, w, h, area = (int(v) for v in stats[label])
        if not (GLYPH_HEIGHT[0] * unit <= h + 2 * erode <= GLYPH_HEIGHT[1] * unit
                and GLYPH_WIDTH[0] * unit <= w + 2 * erode <= GLYPH_WIDTH[1] * unit):
            continue
        if x <= erode or y <= erode or x + w >= width - erode or y + h >= height - erode:
            continue  # it runs into the frame or the art: not a glyph on its own
        offset = float(np.hypot(x + w / 2 - centre[0], y + h / 2 - centre[1])) / unit
        if offset > MAX_CENTRE_OFFSET:
            continue
        key = offset - 5 * min(area / unit ** 2, 0.001)  # nearest, a large blob before a speck beside it
        if best is None or key < best[0]:
            best = (key, label)
    return best[1] if best is not None else None
