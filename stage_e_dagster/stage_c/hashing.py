"""Perceptual hashes shared by Stage C and the canonical catalogue.

Stage D compares a card's ``art_phash`` with each printing's, so the catalogue import and the
synthetic corpus must hash canonical art with exactly these functions (the distance between two
stored hashes, ``hamming``, is a shared evidence fact).

The hash is ImageHash's ``phash`` (hash size 8), the function every stored hash was made with,
computed here with NumPy: ImageHash takes its DCT from ``scipy.fftpack``, whose import put 26 MB
on every Stage C worker at its first card, a fifteenth of its memory bar. The bits are ImageHash's
on every real image (``tests/stage_c/test_hashing.py`` compares them). Only where two coefficients
tie exactly at their median (a synthetic flat image with one odd pixel) does each library's
rounding decide the bit, and the two can differ there.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from ..catalog.evidence_facts import hamming
from .geometry import box_px, classify_bleed

__all__ = ["art_crop", "art_phash", "hamming", "phash_int", "signed64"]


def signed64(value: int) -> int:
    """An unsigned 64-bit hash as the signed integer a BIGINT column holds."""
    return value - (1 << 64) if value >= (1 << 63) else value


# ImageHash's phash: the image in grey, resized (Lanczos) to HASH_SIDE * HIGHFREQ_FACTOR square, its
# two-dimensional DCT-II (unnormalised, as scipy.fftpack.dct gives it), the HASH_SIDE x HASH_SIDE lowest
# frequencies, each bit set where the coefficient is above their median, in row-major order.
HASH_SIDE = 8
HIGHFREQ_FACTOR = 4
_PIXELS = HASH_SIDE * HIGHFREQ_FACTOR
# The DCT-II's lowest HASH_SIDE rows: y[k] = 2 * sum_n x[n] * cos(pi * k * (2n + 1) / (2N)).
_DCT_ROWS = 2.0 * np.cos(np.pi * np.outer(np.arange(HASH_SIDE), 2 * np.arange(_PIXELS) + 1) / (2 * _PIXELS))
# A coefficient this close to zero is zero: a flat image (a blank frame, a solid-colour crop) has none
# but its mean, exactly, in scipy's DCT, and rounding must not give it hash bits it never had.
_ZERO = 1e-6


def phash_int(image: Image.Image) -> int:
    """The 64-bit DCT perceptual hash of ``image`` as a signed integer (ImageHash's ``phash``, hash size 8)."""
    small = image.convert("L").resize((_PIXELS, _PIXELS), Image.Resampling.LANCZOS)
    low = _DCT_ROWS @ np.asarray(small, dtype=np.float64) @ _DCT_ROWS.T
    low[np.abs(low) < _ZERO] = 0.0
    value = 0
    for bit in (low > np.median(low)).ravel():
        value = (value << 1) | int(bit)
    return signed64(value)


def art_crop(image: Image.Image) -> Image.Image:
    """The art box of a full card image, bleed or trimmed (an unclear aspect is read as trimmed)."""
    width, height = image.size
    return image.crop(box_px("art", width, height, classify_bleed(width, height)))


def art_phash(image: Image.Image) -> int:
    """Perceptual hash of the art box of a full card image."""
    return phash_int(art_crop(image))
