"""Perceptual hashes shared by Stage C and the canonical catalogue.

Stage D compares a card's ``art_phash`` with each printing's, so the catalogue import and the
synthetic corpus must hash canonical art with exactly these functions (the distance between two
stored hashes, ``hamming``, is a shared evidence fact).
"""

from __future__ import annotations

import imagehash
from PIL import Image

from ..catalog.evidence_facts import hamming
from .geometry import box_px, classify_bleed

__all__ = ["art_crop", "art_phash", "hamming", "phash_int", "signed64"]


def signed64(value: int) -> int:
    """An unsigned 64-bit hash as the signed integer a BIGINT column holds."""
    return value - (1 << 64) if value >= (1 << 63) else value


def phash_int(image: Image.Image) -> int:
    """The 64-bit DCT perceptual hash of ``image`` as a signed integer."""
    return signed64(int(str(imagehash.phash(image.convert("L"), hash_size=8)), 16))


def art_crop(image: Image.Image) -> Image.Image:
    """The art box of a full card image, bleed or trimmed (an unclear aspect is read as trimmed)."""
    width, height = image.size
    return image.crop(box_px("art", width, height, classify_bleed(width, height)))


def art_phash(image: Image.Image) -> int:
    """Perceptual hash of the art box of a full card image."""
    return phash_int(art_crop(image))
