"""The set symbol's shape as both sides store it: a small silhouette, compared by overlap.

Stage C reads the glyph on a photographed card; the importer renders each set's icon. They meet only
in stored bytes, so the descriptor is made and compared here, below both: a silhouette (holes filled,
since a rarity-coloured symbol reads as its black outline and a black one as a solid shape), cropped
to its bounding box, centred in a square that keeps its aspect, and scaled to ``SHAPE_SIDE`` pixels
a side, one bit a pixel.
"""

from __future__ import annotations

import cv2
import numpy as np

SHAPE_SIDE = 32
SHAPE_BYTES = SHAPE_SIDE * SHAPE_SIDE // 8


def fill_holes(mask: np.ndarray) -> np.ndarray:
    """``mask`` with every region it encloses filled: what cannot be reached from outside it."""
    h, w = mask.shape
    padded = np.zeros((h + 2, w + 2), np.uint8)
    padded[1:-1, 1:-1] = mask.astype(bool)
    outside = padded.copy()
    cv2.floodFill(outside, np.zeros((h + 4, w + 4), np.uint8), (0, 0), 1)
    return (padded.astype(bool) | (outside == 0))[1:-1, 1:-1]


def shape_descriptor(mask: np.ndarray) -> bytes | None:
    """The stored descriptor of a glyph ``mask`` (True where the glyph is); None for an empty mask."""
    silhouette = fill_holes(mask)
    ys, xs = np.nonzero(silhouette)
    if len(xs) == 0:
        return None
    glyph = silhouette[ys.min():ys.max() + 1, xs.min():xs.max() + 1].astype(np.float32)
    h, w = glyph.shape
    side = max(h, w)
    square = np.zeros((side, side), np.float32)
    top, left = (side - h) // 2, (side - w) // 2
    square[top:top + h, left:left + w] = glyph
    small = cv2.resize(square, (SHAPE_SIDE, SHAPE_SIDE), interpolation=cv2.INTER_AREA) >= 0.5
    return np.packbits(small).tobytes()


def descriptor_mask(descriptor: bytes) -> np.ndarray:
    """The ``SHAPE_SIDE`` square silhouette a descriptor holds."""
    if len(descriptor) != SHAPE_BYTES:
        raise ValueError(f"a symbol descriptor is {SHAPE_BYTES} bytes, not {len(descriptor)}")
    return np.unpackbits(np.frombuffer(descriptor, np.uint8)).astype(bool).reshape(SHAPE_SIDE, SHAPE_SIDE)


def shape_overlap(a: bytes, b: bytes) -> float:
    """Intersection over union of two descriptors' silhouettes: 1.0 the same shape, 0.0 disjoint."""
    ma, mb = descriptor_mask(a), descriptor_mask(b)
    union = int((ma | mb).sum())
    return int((ma & mb).sum()) / union if union else 0.0
