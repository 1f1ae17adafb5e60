"""Card localisation: find the card's quadrilateral in an upload and warp it upright to the card frame.

Every Stage C extractor reads the card this module returns, never the raw upload, so a photo's
table, top-loader or sleeve is not sampled as the card's border and the bottom band is cut from
the card itself. The search runs on a copy downscaled to ``SEARCH_SIDE`` pixels (it stays cheap);
only the final warp touches full-resolution pixels.

Three outcomes, each named in the evidence:

- ``contour``: a card-shaped quadrilateral was found among the edge contours;
- ``whole-image``: none was, but the upload itself has a card's aspect (a digital render, a print
  file with bleed): the card is the whole image, as before localisation existed;
- ``fallback``: neither; the whole image is used as today, with a confidence of 0.

Two more name uploads no single card reading can be trusted on: ``several-cards`` (a second
card-shaped quad of about the same size beside the one found) and ``graded-slab`` (the card sits
in a larger case with a tall label band at one end). The best quad is still warped and read, at
confidence 0, so the evidence is kept; Stage D abstains on both, never voting for whichever card
was found first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import cv2
import numpy as np
from PIL import Image

from ..catalog.evidence_facts import GRADED_SLAB, LAYOUT_CONFIDENCE_BAR, SEVERAL_CARDS
from .geometry import BLEED_ASPECT, TRIM_ASPECT, BleedClass, classify_bleed

# One OpenCV thread per worker, as the OCR model has one (``text_model.SESSION_THREADS``): cards already run side
# by side, one per worker. With OpenCV's default pool (a thread per CPU in every worker), two workers on
# two CPUs read 70-75% CPU pressure on their own, which the governor takes for a neighbour; with one
# thread they read 5-15% at the same cards per second (measured with `stage-e bulk --workers 2`).
cv2.setNumThreads(1)

Method = Literal["whole-image", "contour", "fallback", "several-cards", "graded-slab"]
Point = tuple[float, float]

SEARCH_SIDE = 640           # long side of the copy the contour search runs on
MIN_AREA_FRACTION = 0.2     # a card filling half the frame's height covers at least ~0.2 of its area
ASPECT_TOLERANCE = 0.025    # spread of the aspect score around the card's aspect (short / long side)
# Below this a quad is not taken as the card, and Stage D does not veto on the border read on it
# (the reading may be of the background): the bar both stages share.
CONFIDENCE_BAR = LAYOUT_CONFIDENCE_BAR
WHOLE_IMAGE_CONFIDENCE = 0.7  # the upload's own aspect is a card's, but nothing inside it confirms it
# A top-loader's outline can fall near a print file's aspect; a physical card is far the likelier.
BLEED_PREFERENCE = 0.9
# Edge pixels above this share of the search image (the eight real photos: 0.31-0.42) mean noise.
MAX_EDGE_DENSITY = 0.6
BLEED_ASPECT_SLACK = 0.004  # a found quad is a print file with bleed only this close to (or above) its aspect
# A second card-shaped quad (score over the bar) within this area ratio of the card's and overlapping
# it by less than OTHER_CARD_OVERLAP of the smaller area is another card in the photo.
OTHER_CARD_AREA_RATIO = 0.6
OTHER_CARD_OVERLAP = 0.1
# A case around the card: a quad holding the card's centre, 1.15-2.5 times its area. It is a graded
# slab when one end leaves a label band at least SLAB_LABEL_FRACTION of the card's long side (a
# top-loader leaves about 0.07 at every end; a slab's label about 0.25-0.3) and the sides stay close.
CASE_AREA_RANGE = (1.15, 2.5)
SLAB_LABEL_FRACTION = 0.18
SLAB_SIDE_FRACTION = 0.2


@dataclass(frozen=True)
class Localised:
    """Where the card is in the source and the card itself, upright in the canonical frame.

    ``quad`` lists the card's own top-left, top-right, bottom-right and bottom-left corners in
    source pixels. ``rotation`` is the clockwise quarter turn (0, 90, 180 or 270 degrees)
    applied to make the card upright; ``tilt_deg`` is the small remaining tilt of the card in
    the source (positive = clockwise), removed by the warp.
    """

    card: Image.Image
    quad: tuple[Point, Point, Point, Point]
    confidence: float
    rotation: int
    tilt_deg: float
    method: Method
    bleed_class: BleedClass | None
    source_size: tuple[int, int]

    def evidence(self) -> dict[str, Any]:
        return {
            "card_quad": [[round(x, 1), round(y, 1)] for x, y in self.quad],
            "localisation_confidence": round(self.confidence, 3),
            "localisation_rotation": self.rotation,
            "localisation_tilt_deg": round(self.tilt_deg, 2),
            "localisation_method": self.method,
        }


def _image_corners(width: int, height: int) -> tuple[Point, Point, Point, Point]:
    return ((0.0, 0.0), (float(width), 0.0), (float(width), float(height)), (0.0, float(height)))


def _order_clockwise(points: np.ndarray) -> np.ndarray:
    """Four points ordered clockwise (in image coordinates) starting from the one nearest the top-left."""
    centre = points.mean(axis=0)
    angles = np.arctan2(points[:, 1] - centre[1], points[:, 0] - centre[0])
    ordered = points[np.argsort(angles)]
    start = int(np.argmin(ordered.sum(axis=1)))
    return np.roll(ordered, -start, axis=0)


def _fit_quad(hull: np.ndarray) -> np.ndarray:
    """A four-corner polygon for a convex hull: the simplest polygon approximation, else its minimum-area box."""
    perimeter = cv2.arcLength(hull, True)
    for eps in (0.01, 0.02, 0.03, 0.05, 0.08):
        approx = cv2.approxPolyDP(hull, eps * perimeter, True)
        if len(approx) == 4:
            return approx.reshape(4, 2).astype(np.float32)
    return cv2.boxPoints(cv2.minAreaRect(hull)).astype(np.float32)


@dataclass(frozen=True)
class _Candidate:
    corners: np.ndarray      # clockwise from the image-top-left-most corner, search-image pixels
    score: float
    portrait: bool
    bleed_class: BleedClass


def _side_lengths(c: np.ndarray) -> tuple[float, float]:
    """Mean horizontal-ish and vertical-ish side lengths of a clockwise quad."""
    d = [float(np.linalg.norm(c[(i + 1) % 4] - c[i])) for i in range(4)]
    return (d[0] + d[2]) / 2, (d[1] + d[3]) / 2


def _score(corners: np.ndarray, hull_area: float, frame_area: float) -> _Candidate | None:
    quad_area = float(cv2.contourArea(corners))
    if quad_area <= 0 or quad_area < MIN_AREA_FRACTION * frame_area:
        return None
    horizontal, vertical = _side_lengths(corners)
    aspect = min(horizontal, vertical) / max(horizontal, vertical)
    # A photographed card is a physical card and has no bleed; perspective and a loose quad easily
    # push its aspect half-way to a print file's, so only a quad at a print file's own aspect is one.
    bleed: BleedClass = "bleed" if aspect >= BLEED_ASPECT - BLEED_ASPECT_SLACK else "trimmed"
    error = min(abs(aspect - TRIM_ASPECT), abs(aspect - BLEED_ASPECT))
    aspect_score = math.exp(-((error / ASPECT_TOLERANCE) ** 2))
    # Corners near 90 degrees: a card seen face-on, or with the mild perspective of a phone photo.
    worst_cos = 0.0
    for i in range(4):
        a, b = corners[i - 1] - corners[i], corners[(i + 1) % 4] - corners[i]
        worst_cos = max(worst_cos, abs(float(np.dot(a, b))) / (float(np.linalg.norm(a) * np.linalg.norm(b)) + 1e-9))
    angle_score = max(0.0, 1.0 - (worst_cos / 0.35) ** 2)
    fill = min(1.0, hull_area / quad_area)  # a quad fitted to a rounded blob is not a card edge
    size_score = 0.8 + 0.2 * min(1.0, quad_area / frame_area)
    score = aspect_score * angle_score * fill ** 2 * size_score
    if bleed == "bleed":
        score *= BLEED_PREFERENCE
    return _Candidate(corners, score, vertical >= horizontal, bleed)


# (low, high Canny threshold, dilation passes). A low threshold and one dilation close a faint
# card edge. Tried on the eight real photos: adding stricter passes finds tighter outlines for a
# card on a stack, but also the inner frame of others, and the score cannot tell them apart.
EDGE_PASSES = ((30, 90, 1),)


def _edge_maps(small: np.ndarray) -> list[np.ndarray]:
    """Edges of any of the three colour channels (a card on a table of the same brightness still
    differs in colour), once per pass of ``EDGE_PASSES``."""
    blurred = cv2.GaussianBlur(small, (5, 5), 0)
    maps = []
    for low, high, dilation in EDGE_PASSES:
        edges = np.zeros(small.shape[:2], dtype=np.uint8)
        for channel in range(3):
            edges |= cv2.Canny(blurred[:, :, channel], low, high)
        maps.append(cv2.dilate(edges, np.ones((3, 3), np.uint8), iterations=dilation) if dilation else edges)
    return maps


def _candidates(small: np.ndarray) -> list[_Candidate]:
    frame_area = float(small.shape[0] * small.shape[1])
    maps = _edge_maps(small)
    found: list[_Candidate] = []
    if any(float((edges > 0).mean()) > MAX_EDGE_DENSITY for edges in maps):
        return found  # noise or fine texture: its edge blob is the whole frame, not a card
    contours = [c for edges in maps
                for c in cv2.findContours(edges, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)[0]]
    for contour in contours:
        hull = cv2.convexHull(contour)
        hull_area = float(cv2.contourArea(hull))
        if hull_area < MIN_AREA_FRACTION * frame_area:
            continue
        candidate = _score(_order_clockwise(_fit_quad(hull)), hull_area, frame_area)
        if candidate is not None:
            found.append(candidate)
    return found


def _area(c: _Candidate) -> float:
    return float(cv2.contourArea(c.corners))


def _another_card(best: _Candidate, candidates: list[_Candidate]) -> bool:
    """A second card of about the same size beside ``best``, not overlapping it."""
    best_area = _area(best)
    for c in candidates:
        if c is best or c.score < CONFIDENCE_BAR:
            continue
        area = _area(c)
        if not OTHER_CARD_AREA_RATIO <= area / best_area <= 1 / OTHER_CARD_AREA_RATIO:
            continue
        overlap, _ = cv2.intersectConvexConvex(best.corners.astype(np.float32), c.corners.astype(np.float32))
        if overlap < OTHER_CARD_OVERLAP * min(area, best_area):
            return True
    return False


def _in_slab(best: _Candidate, candidates: list[_Candidate]) -> bool:
    """``best`` sits in a case with a tall label band at one end of its long side."""
    card_area = _area(best)
    centre = best.corners.mean(axis=0)
    # The card's own axes: u along its short side, v along its long side (unit vectors).
    horizontal = (best.corners[1] - best.corners[0] + best.corners[2] - best.corners[3]) / 2
    vertical = (best.corners[3] - best.corners[0] + best.corners[2] - best.corners[1]) / 2
    short, long = (horizontal, vertical) if best.portrait else (vertical, horizontal)
    short_len, long_len = float(np.linalg.norm(short)), float(np.linalg.norm(long))
    u, v = short / (short_len + 1e-9), long / (long_len + 1e-9)
    for c in candidates:
        area = _area(c)
        if c is best or not CASE_AREA_RANGE[0] <= area / card_area <= CASE_AREA_RANGE[1]:
            continue
        if cv2.pointPolygonTest(c.corners.astype(np.float32), (float(centre[0]), float(centre[1])), False) < 0:
            continue
        along_v = (c.corners - centre) @ v
        along_u = (c.corners - centre) @ u
        ends = sorted((float(along_v.max()) - long_len / 2, -float(along_v.min()) - long_len / 2))
        sides = max(float(along_u.max()) - short_len / 2, -float(along_u.min()) - short_len / 2)
        if ends[1] >= SLAB_LABEL_FRACTION * long_len and ends[0] < ends[1] / 2 \
                and sides <= SLAB_SIDE_FRACTION * short_len:
            return True
    return False


def _orientation_cue(card: np.ndarray) -> float:
    """Positive when the card looks upright, negative when it looks upside down.

    The cue is the rules-text box: on almost every frame it is a light, plain panel in the lower
    half of the card, while the mirrored place in the upper half holds the art. A card turned
    180 degrees shows the panel at the top.
    """
    hsv = cv2.cvtColor(card, cv2.COLOR_RGB2HSV).astype(np.float32)
    h, w = card.shape[:2]
    x0, x1 = round(0.1 * w), round(0.9 * w)

    def panel(y0: float, y1: float) -> float:
        region = hsv[round(y0 * h):round(y1 * h), x0:x1]
        return float(region[:, :, 2].mean() - region[:, :, 1].mean() - region[:, :, 2].std())

    return (panel(0.64, 0.86) - panel(0.14, 0.36)) / 255.0


def _warp(source: np.ndarray, corners: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    w, h = size
    target = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(corners.astype(np.float32), target)
    return cv2.warpPerspective(source, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def _tilt(card_corners: np.ndarray, rotation: int) -> float:
    top = card_corners[1] - card_corners[0]
    angle = math.degrees(math.atan2(float(top[1]), float(top[0])))
    turned = (360 - rotation) % 360  # how far the card was turned clockwise in the source
    return (angle - turned + 180.0) % 360.0 - 180.0


def _upright(card_corners: np.ndarray, rotation: int, small: np.ndarray, aspect: float) -> tuple[np.ndarray, int]:
    """The card's corners and rotation after the 180-degree check on a small warp."""
    probe = _warp(small, card_corners, (120, round(120 / aspect)))
    if _orientation_cue(probe) < 0:
        return np.roll(card_corners, 2, axis=0), (rotation + 180) % 360
    return card_corners, rotation


def localise_card(image: Image.Image) -> Localised:
    """Find the card in ``image`` (RGB) and return it upright in the card frame, with what was found."""
    width, height = image.size
    source = np.asarray(image)
    scale = min(1.0, SEARCH_SIDE / max(width, height))
    search_size = (max(1, round(width * scale)), max(1, round(height * scale)))
    small = source if scale == 1.0 else cv2.resize(source, search_size, interpolation=cv2.INTER_AREA)
    own_class = classify_bleed(width, height)
    candidates = _candidates(small)
    if own_class is not None:
        # A card-shaped upload: a landscape quad inside it is the art box of a render, not a turned card.
        candidates = [c for c in candidates if c.portrait]
    best = max(candidates, key=lambda c: c.score, default=None)

    if best is not None and best.score >= CONFIDENCE_BAR:
        # Card corners (top-left, top-right, bottom-right, bottom-left) in the search copy.
        small_corners = best.corners
        if best.portrait:
            rotation = 0
        else:  # the card's top points to the image's right: turn it back a quarter
            small_corners, rotation = np.roll(small_corners, -1, axis=0), 270
        aspect = TRIM_ASPECT if best.bleed_class == "trimmed" else BLEED_ASPECT
        small_corners, rotation = _upright(small_corners, rotation, small, aspect)
        corners = small_corners / scale
        horizontal, vertical = _side_lengths(corners)
        card_h = max(1, round(max(vertical, horizontal)))
        card = _warp(source, corners, (max(1, round(card_h * aspect)), card_h))
        quad = tuple((float(x), float(y)) for x, y in corners)
        crowded: Method | None = (SEVERAL_CARDS if _another_card(best, candidates)  # type: ignore[assignment]
                                  else GRADED_SLAB if _in_slab(best, candidates) else None)
        return Localised(Image.fromarray(card), quad, 0.0 if crowded else min(1.0, best.score),  # type: ignore[arg-type]
                         rotation, _tilt(corners, rotation), crowded or "contour", best.bleed_class, (width, height))

    if own_class is not None:
        return Localised(image, _image_corners(width, height), WHOLE_IMAGE_CONFIDENCE, 0, 0.0, "whole-image",
                         own_class, (width, height))
    return Localised(image, _image_corners(width, height), 0.0, 0, 0.0, "fallback", None, (width, height))


def card_with_margin(source: Image.Image, localised: Localised, margin: float, min_side: int = 0) -> np.ndarray:
    """The card ``localised`` found, upright, with ``margin`` of its own width and height more on every
    side, cut from ``source`` (the upload): a quad found on a card's inner frame rather than its edge
    still leaves the collector line printed below that frame in view. A card whose long side is under
    ``min_side`` pixels (a webcam frame) is enlarged to it in the same warp, so its small type is
    interpolated once, not again by every closer look. An RGB array, as the reader takes it: a Pillow image
    of it would be one more copy of the card's pixels (and the reader's array of that, another) held while
    the detector takes its largest buffers."""
    width, height = localised.card.size
    frame = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    to_source = cv2.getPerspectiveTransform(frame, np.array(localised.quad, dtype=np.float32))
    mx, my = margin * width, margin * height
    wider = np.array([[[-mx, -my], [width + mx, -my], [width + mx, height + my], [-mx, height + my]]],
                     dtype=np.float32)
    corners = cv2.perspectiveTransform(wider, to_source)[0]
    scale = max(1.0, min_side / max(width, height))
    size = (round((width + 2 * mx) * scale), round((height + 2 * my) * scale))
    target = np.array([[0, 0], [size[0], 0], [size[0], size[1]], [0, size[1]]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(corners, target)
    return cv2.warpPerspective(np.asarray(source), matrix, size, borderMode=cv2.BORDER_REPLICATE,
                               flags=cv2.INTER_CUBIC if scale > 1.0 else cv2.INTER_LINEAR)


# Beside the card, at least this share of its own width (or above or below it, of its height) left in
# the upload: room for another card's lines, which a read of the card alone would not see.
ROOM_FOR_ANOTHER = 0.5


def room_for_another_card(localised: Localised) -> bool:
    """Whether the upload leaves room beside the card found for another card's text."""
    xs, ys = [x for x, _ in localised.quad], [y for _, y in localised.quad]
    width, height = localised.source_size
    card_w, card_h = max(xs) - min(xs), max(ys) - min(ys)
    return (max(min(xs), width - max(xs)) >= ROOM_FOR_ANOTHER * card_w
            or max(min(ys), height - max(ys)) >= ROOM_FOR_ANOTHER * card_h)
