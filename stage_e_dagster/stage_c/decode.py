"""Decode fetched bytes into an upright image, with guards against decompression bombs and truncated files.

A phone stores a photo as the sensor read it and names the turn to show it in the EXIF
``Orientation`` tag; the image is turned here, so every later step sees what the person saw."""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

# A 600 DPI card with bleed is about 4,200 x 5,700 = 24 Mpx; far beyond that is a bomb, not a card.
DEFAULT_MAX_PIXELS = 40_000_000
# The long side an upload is read at. A larger JPEG is decoded at a half (quarter, eighth) of its size,
# never below this (the decoder's own DCT scaling is four times cheaper than a full decode), and what is
# still larger is resized to it: an 8-12 Mpx photo held whole cost a run worker 23-36 MB per copy, the
# localised card warped from it as much again, and every later step the CPU, for detail no extractor
# reads (the collector line's type stays 15 px and more on a card that fills a third of the frame).
DECODE_SIDE = 2000


@dataclass(frozen=True)
class Decoded:
    """A decoded RGB image, or the named reason there is none."""

    image: Image.Image | None
    image_format: str | None
    error: str | None  # not-an-image | truncated-image | decompression-bomb
    width: int | None = None   # the upload's own size (the header's, EXIF turn applied), not the decoded copy's
    height: int | None = None

    @property
    def truncated(self) -> bool:
        return self.error == "truncated-image"


def decode_image(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, side: int | None = DECODE_SIDE) -> Decoded:
    """Open and fully load ``data``; the pixel count is checked from the header before any pixel is decoded.
    An image longer than ``side`` is read at that long side, a JPEG scaled down by its decoder first
    (None: always whole)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return Decoded(None, None, "decompression-bomb")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return Decoded(None, None, "not-an-image")
    width, height = image.size
    fmt = image.format
    if width <= 0 or height <= 0:
        return Decoded(None, fmt, "not-an-image", width, height)
    if width * height > max_pixels:
        return Decoded(None, fmt, "decompression-bomb", width, height)
    if fmt == "JPEG" and side is not None and max(width, height) >= 2 * side:
        scale = side / max(width, height)
        image.draft("RGB", (math.ceil(width * scale), math.ceil(height * scale)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image.load()
    except OSError as exc:
        message = str(exc).lower()
        kind = "truncated-image" if "truncated" in message or "broken data stream" in message else "not-an-image"
        return Decoded(None, fmt, kind, width, height)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return Decoded(None, fmt, "decompression-bomb", width, height)
    except (SyntaxError, ValueError, EOFError):
        return Decoded(None, fmt, "not-an-image", width, height)
    try:
        # In place: with no turn to make, a copy of the whole photo for nothing (4 ms a card).
        ImageOps.exif_transpose(image, in_place=True)
    except (OSError, SyntaxError, ValueError, TypeError):
        pass  # an unreadable EXIF block is not a reason to lose the picture: keep it as stored
    if image.mode != "RGB":
        image = image.convert("RGB")
    if side is not None and max(image.size) > side:
        scale = side / max(image.size)
        image = image.resize((max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale))),
                             Image.Resampling.BILINEAR, reducing_gap=2.0)
    turned = (image.size[0] > image.size[1]) != (width > height)
    return Decoded(image, fmt, None, *((height, width) if turned else (width, height)))
