"""Read a card's text where the text is: detect lines, turn them upright, recognise the two ends.

When the localiser is sure of the card, detection runs once on a copy of the card itself
(``CARD_DETECT_SIDE``), which holds nothing but the card; otherwise on a downscaled copy of the whole
upload. The direction of the text comes from the detected boxes (their long axis) and, unless the
lines' layout on the card already says which way is up, the direction classifier (upright or turned
over), so a sideways or upside-down card reads like an upright one. Only the lines at the two ends of
the card's text are recognised, each at its own width, cropped from the full-resolution image: the title
end (the name) and the collector end (collector line, credit, legal line). When that gives no reading
the catalogue confirms, the two bands where the title and the collector line print are detected
again, enlarged, and every line in them is read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

import numpy as np
from PIL import Image

from . import text_model
from .parse import LEGAL_WORDS

# Long side of the copy the first detection runs on: the card's, when the localiser is sure of it, else
# the whole upload's (the cheap pass: CHEAP_DETECT_SIDE).
CARD_DETECT_SIDE = 640  # 480 lost a number the old reader read, 800 read the same for more CPU
DETECT_SIDE = 960
CHEAP_DETECT_SIDE = 480
# Long side of the second, closer detection of the text's region (only when the ends confirm nothing).
CLOSE_SIDE = 1600
# Rows read at each end of the card's text on the first pass. The collector end's last NEAR_ROWS are read
# first; its rows above them (often the rules text's last lines, the widest and dearest to recognise)
# only when those confirm nothing.
TITLE_ROWS = 2
COLLECTOR_ROWS = 4
NEAR_ROWS = 2
# Lines the direction classifier looks at (the longest ones).
DIRECTION_SAMPLE = 5
# Boxes at least this much longer than high say which way the text runs.
LINE_ASPECT = 2.0
# A card's lines reach across about one longest line (1.0-1.7 on 41 real photos); a photo of several
# cards side by side spreads its many lines over two or more (2.3-5.1 on three such photos).
SIDE_BY_SIDE_SPREAD = 2.0
SIDE_BY_SIDE_LINES = 12
SEVERAL_CARDS_SIDE = 640
# The closer look: bands at each end of the text's region, as fractions of its height, widened along
# the text by SIDE_MARGIN of its width, enlarged to CLOSE_SIDE pixels wide (at most MAX_UPSCALE times).
COLLECTOR_BAND = 0.22
BELOW_MARGIN = 0.10
TITLE_BAND = 0.10
ABOVE_MARGIN = 0.05
SIDE_MARGIN = 0.06
MAX_UPSCALE = 4.0
# The card is read with this much of its width and height more on every side (``card_with_margin``): a
# quad found on the card's inner frame leaves the collector line below it.
CARD_MARGIN = 0.08
# A card smaller than this (its long side, in pixels) is read enlarged to it: a webcam frame's card.
CARD_MIN_SIDE = 900
# The closer look on a known card: a band from just above its last row (ROW_SLACK of the card's height)
# to BELOW_LAST_ROW under it, where the collector line and the legal line print, and the title's band
# when the first look read none (the card's first CARD_BAND when it found no rows), enlarged to
# CARD_CLOSE_SIDE pixels wide.
CARD_BAND = 0.2
ROW_SLACK = 0.015
BELOW_LAST_ROW = 0.07
CARD_CLOSE_SIDE = 1600
# A first look on a card that found fewer lines than this has not found the card's text: a card shows its
# name, type line, rules, credit and legal line (8-25 lines on the real photos read right, 4 on a full-art
# land). On an upload taken whole only for its aspect, the caller's read as an upload looks next, larger.
CARD_MIN_LINES = 3
# A collector end worth the last resort: three digits in a row (a number, a year) or the legal line's words.
_WORTH_A_WIDER_LOOK = re.compile(r"\d{3}|\u00a9|wizards|coast|\bllc\b", re.IGNORECASE)
# The layout that says a card is upright: of its lines running with the text, at least LAYOUT_MIN_LINES
# lie in the LOWER_HALF of the card (type line, rules, collector line) and LAYOUT_MARGIN times as many
# as in the UPPER_HALF (the art's; a card turned over shows the opposite).
LOWER_HALF = (0.52, 0.97)
UPPER_HALF = (0.10, 0.48)
LAYOUT_MIN_LINES = 3
LAYOUT_MARGIN = 3.0
# A band larger than the first look's copy is detected in two overlapping parts (see _detect_in_parts).
BAND_PART_PIXELS = DETECT_SIDE * DETECT_SIDE * 3 // 4


@dataclass(frozen=True)
class TextLine:
    """One recognised line: its text, the recogniser's score (0-1), and its box in upright card
    coordinates (source pixels, measured along the text and down it)."""

    text: str
    score: float
    left: float
    top: float
    width: float
    height: float
    end: str  # "title" or "collector"


@dataclass
class CardText:
    """What the reader found: lines in reading order (top to bottom, left to right)."""

    lines: list[TextLine] = field(default_factory=list)
    rotation: int = 0            # the text's up, in quarter turns clockwise from the upload's up (0-270)
    angle_deg: float = 0.0       # the text's exact direction in the upload, degrees clockwise
    passes: tuple[str, ...] = ()  # "ends", then "close" when the closer read ran
    detected: int = 0            # lines the first detection found
    spread: float = 0.0          # how far the lines running with the text reach across, in longest lines
    aligned: int = 0             # lines running with the text (the spread counts these)
    on_card: bool = False        # read on the localised card: ``rotation`` is then the text's up on the card

    @property
    def side_by_side(self) -> bool:
        """The text spreads across several card widths: cards lie side by side."""
        return self.aligned >= SIDE_BY_SIDE_LINES and self.spread >= SIDE_BY_SIDE_SPREAD

    def at(self, end: str) -> list[TextLine]:
        return [line for line in self.lines if line.end == end]

    def rows(self, end: str | None = None) -> list[str]:
        """Texts of the lines of one end (all lines when None), boxes on one printed line joined."""
        lines = self.lines if end is None else self.at(end)
        return join_rows(lines)

    def legal_rows(self) -> list[str]:
        """The rows of the collector end that show the legal line's words."""
        return [row for row in self.rows("collector") if LEGAL_WORDS.search(row)]


Item = TypeVar("Item", "TextLine", "_Box")


def group_rows(items: Sequence[Item], top: Callable[[Item], float],
               height: Callable[[Item], float]) -> list[list[Item]]:
    """Items, top to bottom, in printed rows: an item whose vertical centre lies within half the row's
    smallest height of the row's mean centre joins that row."""
    rows: list[list[Item]] = []
    for item in sorted(items, key=lambda it: top(it) + height(it) / 2):
        centre = top(item) + height(item) / 2
        if rows:
            last = rows[-1]
            last_centre = sum(top(it) + height(it) / 2 for it in last) / len(last)
            if abs(centre - last_centre) <= 0.5 * min(height(it) for it in last):
                last.append(item)
                continue
        rows.append([item])
    return rows


def join_rows(lines: Sequence[TextLine]) -> list[str]:
    """The lines' text row by row, boxes on one printed row joined left to right."""
    return [" ".join(ln.text for ln in sorted(row, key=lambda ln: ln.left) if ln.text)
            for row in group_rows(lines, lambda ln: ln.top, lambda ln: ln.height)]


Confirms = Callable[["CardText"], bool]


def _to_rgb(image: Image.Image | np.ndarray) -> np.ndarray:
    """The upload's pixels as an array, in RGB as they are (an RGB image is not converted: that is a copy;
    an array, which is RGB already, is taken as it is).

    The models read BGR, but only the copies they are given are turned to it, each once it is scaled or
    cut (``_bgr``): every channel is scaled and warped alone, so that gives the same pixels as turning
    the whole upload first, without a copy of the upload (36 MB and 10-20 ms for a 12-megapixel photo)."""
    if isinstance(image, np.ndarray):
        return image
    return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))


def _bgr(rgb: np.ndarray) -> np.ndarray:
    """An RGB copy as the models read it (OpenCV swaps the channels in one pass); an empty crop as it is."""
    import cv2

    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if rgb.size else rgb


def _resized(rgb: np.ndarray, side: int) -> tuple[np.ndarray, float]:
    """A BGR copy whose long side is at most ``side``, and the factor applied. A small upload (under
    half that) is enlarged to it, at most ``MAX_UPSCALE`` times, so that its type reaches a size the
    detector finds; a webcam frame or a phone photo is only ever made smaller."""
    import cv2

    h, w = rgb.shape[:2]
    scale = side / max(h, w)
    scale = min(MAX_UPSCALE, scale) if scale >= 2.0 else min(1.0, scale)
    if scale == 1.0:
        return _bgr(rgb), 1.0
    interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_CUBIC
    return _bgr(cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))),
                           interpolation=interpolation)), scale


def _long_axis(box: np.ndarray) -> tuple[float, float, float]:
    """The box's long-axis direction (degrees in [0, 180), image y downward), its length and its width
    across (at least 1)."""
    e1, e2 = box[1] - box[0], box[2] - box[1]
    long, short = (e1, e2) if np.hypot(*e1) >= np.hypot(*e2) else (e2, e1)
    angle = math.degrees(math.atan2(float(long[1]), float(long[0]))) % 180.0
    return angle, float(np.hypot(*long)), max(1.0, float(np.hypot(*short)))


def text_direction(boxes: np.ndarray) -> float:
    """The direction the text runs in (degrees clockwise from the image's x axis, modulo 180): the
    direction most line boxes share, each line one vote (a few long strokes of handwriting or a
    box's print beside the card must not outvote the card's many lines); 0 when no box is a line."""
    sums = np.zeros(2)
    for box in boxes:
        angle, length, short = _long_axis(box)
        if length / short < LINE_ASPECT:
            continue
        doubled = math.radians(2 * angle)
        sums += np.array([math.cos(doubled), math.sin(doubled)])
    if not sums.any():
        return 0.0
    return (math.degrees(math.atan2(sums[1], sums[0])) / 2) % 180.0


def _frame(angle_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors along the text (reading direction) and down it, in image coordinates."""
    a = math.radians(angle_deg)
    along = np.array([math.cos(a), math.sin(a)])
    down = np.array([-math.sin(a), math.cos(a)])
    return along, down


def _ordered(box: np.ndarray, along: np.ndarray, down: np.ndarray) -> np.ndarray:
    """The box's corners as top-left, top-right, bottom-right, bottom-left of the text frame."""
    centre = box.mean(axis=0)
    rel = box - centre
    by_down = sorted(range(4), key=lambda i: float(rel[i] @ down))
    top = sorted(by_down[:2], key=lambda i: float(rel[i] @ along))
    bottom = sorted(by_down[2:], key=lambda i: float(rel[i] @ along))
    return np.array([box[top[0]], box[top[1]], box[bottom[1]], box[bottom[0]]], dtype=np.float32)


def _crop(image: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """The line cut out along its own axes (a perspective warp of just its box)."""
    import cv2

    width = int(max(np.linalg.norm(corners[0] - corners[1]), np.linalg.norm(corners[2] - corners[3])))
    height = int(max(np.linalg.norm(corners[0] - corners[3]), np.linalg.norm(corners[1] - corners[2])))
    if width < 2 or height < 2:
        return np.zeros((0, 0, 3), dtype=np.uint8)
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(corners.astype(np.float32), target)
    return cv2.warpPerspective(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE,
                               flags=cv2.INTER_CUBIC)


@dataclass
class _Box:
    corners: np.ndarray   # in full-resolution upload pixels, ordered in the text frame
    across: float         # position along the text
    depth: float          # position down the text
    width: float
    height: float

    @property
    def runs_with_text(self) -> bool:
        """A line along the text, not a stroke across it."""
        return self.width >= LINE_ASPECT * self.height


def _boxes(raw: np.ndarray, scale: float, offset: np.ndarray, along: np.ndarray, down: np.ndarray) -> list[_Box]:
    found = []
    for box in raw:
        corners = _ordered(box / scale + offset, along, down)
        centre = corners.mean(axis=0)
        width = float(np.linalg.norm(corners[1] - corners[0]))
        height = float(np.linalg.norm(corners[3] - corners[0]))
        found.append(_Box(corners, float(centre @ along) - width / 2, float(centre @ down) - height / 2, width, height))
    return found


def _upside_down(upload: np.ndarray, boxes: list[_Box]) -> bool:
    """Whether the text reads upside down in the frame: a score-weighted vote of the classifier over
    the longest lines."""
    # Lines that run with the text only: a stroke of writing across it says nothing of the card.
    lines = [b for b in boxes if b.runs_with_text] or boxes
    longest = sorted(lines, key=lambda b: b.width, reverse=True)[:DIRECTION_SAMPLE]
    votes = text_model.upside_down([_bgr(_crop(upload, b.corners)) for b in longest])
    turned = sum(score for flipped, score in votes if flipped)
    upright = sum(score for flipped, score in votes if not flipped)
    return turned > upright


def _layout_says_upright(boxes: list[_Box], top: float, bottom: float) -> bool:
    """On a card seen upright, its lines gather in the lower half (type line, rules text, collector
    line) while the art fills most of the upper half: when they clearly do, the boxes say which way is
    up and the direction classifier is not asked. ``top``..``bottom`` is the card's extent down the text."""
    height = bottom - top
    if height <= 0:
        return False
    depths = [(b.depth + b.height / 2 - top) / height for b in boxes if b.runs_with_text]
    lower = sum(1 for d in depths if LOWER_HALF[0] <= d <= LOWER_HALF[1])
    upper = sum(1 for d in depths if UPPER_HALF[0] <= d <= UPPER_HALF[1])
    return lower >= LAYOUT_MIN_LINES and lower >= LAYOUT_MARGIN * upper


def _flip(box: _Box) -> _Box:
    c = box.corners
    return _Box(np.array([c[2], c[3], c[0], c[1]], dtype=np.float32), -box.across - box.width,
                -box.depth - box.height, box.width, box.height)


def _rows_of(boxes: list[_Box]) -> list[list[_Box]]:
    return group_rows(boxes, lambda b: b.depth, lambda b: b.height)


def _recognise(upload: np.ndarray, boxes: list[tuple[_Box, str]]) -> list[TextLine]:
    """The lines of ``boxes``, cut from the (RGB) upload."""
    return _read_crops([_bgr(_crop(upload, box.corners)) for box, _ in boxes], boxes)


def _read_crops(crops: list[np.ndarray], boxes: list[tuple[_Box, str]], *, careful: bool = False) -> list[TextLine]:
    """The lines of ``boxes`` (each with its end) from their crops; a crop that reads nothing gives no
    line. ``careful`` (the closer looks): each crop padded to the model's input, as it was trained."""
    texts = text_model.recognise(crops, padded=careful)
    return [TextLine(t.text.strip(), round(t.score, 4), round(b.across, 1), round(b.depth, 1), round(b.width, 1),
                     round(b.height, 1), end)
            for (b, end), t in zip(boxes, texts) if t.text.strip()]


def _spread(boxes: list[_Box]) -> tuple[int, float]:
    """How many lines run with the text, and how far they reach across it in longest lines (0 when none)."""
    aligned = [b for b in boxes if b.runs_with_text]
    if not aligned:
        return 0, 0.0
    reach = max(b.across + b.width for b in aligned) - min(b.across for b in aligned)
    return len(aligned), reach / max(b.width for b in aligned)


def _has_title(rows: list[list[_Box]]) -> bool:
    """With no more rows than the collector end takes (a crop of the bottom lines, a full-art card's
    few lines), every row is the collector end's and none is taken for a title."""
    return len(rows) > COLLECTOR_ROWS


@dataclass(frozen=True)
class _Ends:
    """The boxes of the rows at each end of the text: the title end's, and the collector end's split
    into its last ``NEAR_ROWS`` rows and the rows above them."""

    title: list[tuple[_Box, str]]
    far: list[tuple[_Box, str]]
    near: list[tuple[_Box, str]]


def _ends(rows: list[list[_Box]], title_above: float | None = None) -> _Ends:
    """The rows at each end; with ``title_above`` (a depth down the text), the title end takes only rows
    that begin above it: on a known card, its first rows that lie where a title prints."""
    title_rows = TITLE_ROWS if _has_title(rows) else 0
    if title_above is not None:
        title_rows = sum(1 for row in rows[:title_rows] if min(b.depth for b in row) <= title_above)
    first_collector = max(title_rows, len(rows) - COLLECTOR_ROWS)
    first_near = max(first_collector, len(rows) - NEAR_ROWS)

    def boxes(selected: list[list[_Box]], end: str) -> list[tuple[_Box, str]]:
        return [(b, end) for row in selected for b in row]

    return _Ends(boxes(rows[:title_rows], "title"), boxes(rows[first_collector:first_near], "collector"),
                 boxes(rows[first_near:], "collector"))


def _band(upload: np.ndarray, frame: "_Frame", top: float, bottom: float, left: float, right: float,
          side: int) -> tuple[np.ndarray, float]:
    """One band of the text frame (``top``..``bottom`` down the text, ``left``..``right`` along it, in
    source pixels), warped upright and scaled to ``side`` pixels wide (at most ``MAX_UPSCALE`` times),
    in BGR."""
    import cv2

    width, height = right - left, bottom - top
    scale = min(MAX_UPSCALE, side / width)
    out_w, out_h = max(8, round(width * scale)), max(8, round(height * scale))
    corners = np.array([frame.point(left, top), frame.point(right, top), frame.point(right, bottom),
                        frame.point(left, bottom)], dtype=np.float32)
    target = np.array([[0, 0], [out_w, 0], [out_w, out_h], [0, out_h]], dtype=np.float32)
    band = cv2.warpPerspective(upload, cv2.getPerspectiveTransform(corners, target), (out_w, out_h),
                               borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    return _bgr(band), scale


def _band_boxes(band: np.ndarray, scale: float, top: float, left: float, end: str) -> list[tuple[_Box, str]]:
    """Every line box of a band (upright already: its own x and y run along and down the text), placed in
    the text frame."""
    along, down = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    boxes = []
    for box in _detect_in_parts(band):
        (x0, y0), (x1, y1) = box.min(axis=0), box.max(axis=0)
        boxes.append((_Box(_ordered(box, along, down), left + float(x0) / scale, top + float(y0) / scale,
                           float(x1 - x0) / scale, float(y1 - y0) / scale), end))
    return boxes


def _detect_in_parts(band: np.ndarray) -> np.ndarray:
    """The band's line boxes, detected in overlapping parts, top to bottom, when it is larger than the
    first look's copy: the detector's memory grows with the pixels it is given (about 210 MB a
    megapixel), so no part is larger than that copy (``BAND_PART_PIXELS``); two parts when two can
    overlap by a third of a part, else more. A row at most a third of a part high lies whole in one
    part; a row found in two is kept once."""
    height, width = band.shape[:2]
    if height * width <= BAND_PART_PIXELS or height < 16:
        return text_model.detect(band)
    part = max(8, min(height, BAND_PART_PIXELS // width))
    overlap = part // 3
    count = max(2, math.ceil((height - overlap) / (part - overlap)))
    found: list[np.ndarray] = []
    for top in sorted({round(i * (height - part) / (count - 1)) for i in range(count)}):
        for box in text_model.detect(band[top:top + part]):
            box = box + np.array([0.0, top], dtype=np.float32)
            if not any(_same_line(box, kept) for kept in found):
                found.append(box)
    return np.array(found, dtype=np.float32) if found else np.zeros((0, 4, 2), dtype=np.float32)


def _same_line(a: np.ndarray, b: np.ndarray) -> bool:
    """Two boxes of one line: their bounding rectangles overlap by half the smaller one's area."""
    (ax0, ay0), (ax1, ay1) = a.min(axis=0), a.max(axis=0)
    (bx0, by0), (bx1, by1) = b.min(axis=0), b.max(axis=0)
    w, h = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    if w <= 0 or h <= 0:
        return False
    smaller = min((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0))
    return w * h >= 0.5 * smaller


@dataclass(frozen=True)
class _Frame:
    """The text frame: positions along the text and down it, in source pixels, from the origin."""

    along: np.ndarray
    down: np.ndarray

    def point(self, across: float, depth: float) -> np.ndarray:
        return self.along * across + self.down * depth

    def extent(self, width: int, height: int) -> tuple[float, float, float, float]:
        """An image's left, right, top and bottom in this frame."""
        corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float64)
        across, depth = corners @ self.along, corners @ self.down
        return float(across.min()), float(across.max()), float(depth.min()), float(depth.max())


def read_card_text(image: Image.Image | np.ndarray, confirms: Confirms | None = None, *, cheap: bool = False,
                   on_card: bool = False, upload_next: bool = False) -> CardText:
    """Read ``image`` (the upload, any way up; or, with ``on_card``, the card the localiser found and
    turned upright, at most half a turn off; a Pillow image or an RGB array). ``confirms`` says whether a
    read holds a reading the catalogue confirms; without it, or when it says no, the two ends are read
    again closer.

    ``upload_next``: the caller reads the image again as an upload when this read settles nothing (an
    upload taken whole for its card's aspect). A first look on the card that found fewer than
    ``CARD_MIN_LINES`` lines, none of them the legal line (which keeps the caller from reading it again),
    then ends the read: the closer bands would be cut where the card's foot would be, blind (mh2-186:
    one line at 640 px, twelve as an upload at 960 px; tgrn-004: three band parts, 1.1 s, for nothing).

    ``cheap`` is the pass for tests and smoke runs that only need Stage C to have run: one look at a
    small copy, no direction classifier, the first row and the last two read, never a closer look."""
    upload = _to_rgb(image)
    if cheap:
        return _cheap_read(upload)
    if confirms is None:
        confirms = _confirms_nothing
    small, scale = _resized(upload, CARD_DETECT_SIDE if on_card else DETECT_SIDE)
    raw = text_model.detect(small)
    angle = text_direction(raw)
    if on_card and angle > 90.0:  # the card is upright or turned over: take its text as reading rightwards
        angle -= 180.0
    along, down = _frame(angle)
    boxes = _boxes(raw, scale, np.zeros(2, dtype=np.float32), along, down)
    frame = _Frame(along, down)
    if boxes and (not on_card or not _layout_says_upright(boxes, *frame.extent(upload.shape[1], upload.shape[0])[2:])) \
            and _upside_down(upload, boxes):
        angle = (angle + 180.0) % 360.0
        boxes = [_flip(b) for b in boxes]
        frame = _Frame(-along, -down)
    result = CardText(rotation=_quarter_turns(angle), angle_deg=round(angle, 2), detected=len(boxes),
                      on_card=on_card)
    aligned, spread = _spread(boxes)
    result.aligned, result.spread = aligned, round(spread, 3)
    rows = _rows_of(boxes)
    if on_card:
        _, _, top, bottom = frame.extent(upload.shape[1], upload.shape[0])
        ends = _ends(rows, top + (bottom - top) * CARD_BAND)
    else:
        ends = _ends(rows)
    first = _recognise(upload, ends.title + ends.near)
    title, near = [ln for ln in first if ln.end == "title"], [ln for ln in first if ln.end == "collector"]
    result.lines = title + near
    result.passes = ("ends",)
    confirmed = confirms(result)
    if not confirmed and ends.far:
        result.lines = title + _recognise(upload, ends.far) + near
        confirmed = confirms(result)
    if confirmed or not (boxes or on_card) or (upload_next and len(boxes) < CARD_MIN_LINES
                                               and not result.legal_rows()):
        return result
    closer = (_closer_on_card(upload, frame, rows, bool(title)) if on_card
              else _closer_on_text_region(upload, frame, boxes, rows))
    first_look = result.lines
    result.lines, result.passes = _settled(result.lines, closer, confirms), ("ends", "close")
    if on_card and boxes and not confirms(result) and any(_WORTH_A_WIDER_LOOK.search(ln.text)
                                                          for ln in result.at("collector")):
        if _same_legal_line(first_look, closer):
            # Both looks ended the legal line in the same place: no wider look; each line both read is
            # kept as the surer of the two read it (the band's enlarged credit misread some artists).
            result.lines = _surer(result.lines, first_look)
            return result
        # The last resort, on the cards the narrow band did not settle though their collector end shows
        # a number or a legal line (the legal line's number on textured 2003-2014 frames, webcam
        # frames): the collector end of the text's region, across the card, larger.
        wide = _closer_on_text_region(upload, frame, boxes, rows, on_card=True, title=not result.at("title"))
        result.lines, result.passes = _settled(result.lines, wide, confirms), ("ends", "close", "region")
    return result


def _confirms_nothing(text: CardText) -> bool:
    return False


def _same_legal_line(first: list[TextLine], closer: list[TextLine]) -> bool:
    """Whether the first look and the narrow band read the collector end's legal line alike (its letters
    and digits): two looks at two scales that end it in the same place leave nothing on it for a third,
    wider one to find (roe-137's first look missed its legal line, and only the wide look read its end)."""
    def legal(lines: list[TextLine]) -> list[str]:
        return ["".join(ch for ch in row.lower() if ch.isalnum()) for row in CardText(lines=lines).legal_rows()]

    read_first = legal(first)
    return bool(read_first) and read_first == legal(closer)


def _settled(before: list[TextLine], closer: list[TextLine], confirms: Confirms) -> list[TextLine]:
    """The lines after a closer look: each end's closer lines (the earlier ones where it read none at
    that end); when those are not confirmed, every reading of both, the longer where both read one
    line, if that is; else the closer lines as they are."""
    def at(lines: list[TextLine], end: str) -> list[TextLine]:
        return [ln for ln in lines if ln.end == end]

    taken = (at(closer, "title") or at(before, "title")) + (at(closer, "collector") or at(before, "collector"))
    if confirms(CardText(lines=taken)):
        return taken
    both = _merged(at(closer, "title"), at(before, "title")) + _merged(at(closer, "collector"), at(before, "collector"))
    return both if confirms(CardText(lines=both)) else taken


def _surer(lines: list[TextLine], other: list[TextLine]) -> list[TextLine]:
    """``lines``, each replaced by ``other``'s reading of the same printed line at the same end when the
    recogniser was surer of that one (a line read whole there and in two boxes here is kept once)."""
    kept: list[TextLine] = []
    for line in lines:
        same = [o for o in other if o.end == line.end and _same_place(line, o) and o.score > line.score]
        chosen = max(same, key=lambda o: o.score, default=line)
        if chosen not in kept:
            kept.append(chosen)
    return kept


def _merged(closer: list[TextLine], first: list[TextLine]) -> list[TextLine]:
    """The closer look's lines and the first look's, a line both read kept once: the longer reading."""
    kept = list(closer)
    for line in first:
        same = [i for i, other in enumerate(kept) if _same_place(line, other)]
        if not same:
            kept.append(line)
        elif all(len(line.text) > len(kept[i].text) for i in same):
            kept = [other for i, other in enumerate(kept) if i not in same] + [line]
    return kept


def _same_place(a: TextLine, b: TextLine) -> bool:
    """Two readings of one printed line: they overlap along the text, and down it by half the lower one."""
    down = min(a.top + a.height, b.top + b.height) - max(a.top, b.top)
    along = min(a.left + a.width, b.left + b.width) - max(a.left, b.left)
    return along > 0 and down >= 0.5 * min(a.height, b.height)


def _closer_on_card(upload: np.ndarray, frame: _Frame, rows: list[list[_Box]],
                    title_read: bool) -> list[TextLine]:
    """A narrow band of the card from its last rows down, where the collector line and the legal line
    print (the smallest type on the card, often missed or misread at first), detected enlarged and
    read; and the band of its first rows when the first look read no title."""
    left, right, top, bottom = frame.extent(upload.shape[1], upload.shape[0])
    height = bottom - top
    if rows:
        # Along the text, the band spans the text's own width (plus SIDE_MARGIN), not the card's: the same
        # pixels then hold the small type larger.
        boxes = [b for row in rows for b in row]
        span = max(b.across + b.width for b in boxes) - min(b.across for b in boxes)
        left = max(left, min(b.across for b in boxes) - span * SIDE_MARGIN)
        right = min(right, max(b.across + b.width for b in boxes) + span * SIDE_MARGIN)
        last = rows[-1]
        last_top = min(b.depth for b in last)
        last_bottom = max(b.depth + b.height for b in last)
        wanted = [(max(top, last_top - height * ROW_SLACK), min(bottom, last_bottom + height * BELOW_LAST_ROW),
                   "collector")]
    else:
        wanted = [(bottom - height * CARD_BAND, bottom, "collector")]
    if not title_read and (len(rows) > COLLECTOR_ROWS or not rows):
        first_bottom = max((b.depth + b.height for b in rows[0]), default=top) if rows else top + height * CARD_BAND
        wanted.append((top, min(bottom, first_bottom + height * ROW_SLACK), "title"))
    crops, placed = [], []
    for band_top, band_bottom, end in wanted:
        band, scale = _band(upload, frame, band_top, band_bottom, left, right, CARD_CLOSE_SIDE)
        found = _band_boxes(band, scale, band_top, left, end)
        crops += [_crop(band, b.corners) for b, _ in found]
        placed += found
    return _read_crops(crops, placed, careful=True)


def _closer_on_text_region(upload: np.ndarray, frame: _Frame, boxes: list[_Box], rows: list[list[_Box]], *,
                           on_card: bool = False, title: bool = True) -> list[TextLine]:
    """A band at each end of the text's region: where no card was found to say where its ends are, or
    as a known card's last resort (then across the whole card, whose edges bound its lines, and the
    title's band only when ``title``)."""
    left = min(b.across for b in boxes)
    right = max(b.across + b.width for b in boxes)
    top = min(b.depth for b in boxes)
    bottom = max(b.depth + b.height for b in boxes)
    span_w, span_h = right - left, bottom - top
    # The text's region runs past what the coarse look found: the legal line and the collector line
    # of older frames are the smallest type on the card, often missed at first.
    left, right = left - span_w * SIDE_MARGIN, right + span_w * SIDE_MARGIN
    if on_card:
        left, right = frame.extent(upload.shape[1], upload.shape[0])[:2]
    wanted = [(bottom - span_h * COLLECTOR_BAND, bottom + span_h * BELOW_MARGIN, "collector")]
    if title and _has_title(rows):
        wanted.append((top - span_h * ABOVE_MARGIN, top + span_h * TITLE_BAND, "title"))
    lines: list[TextLine] = []
    for band_top, band_bottom, end in wanted:
        if right - left < 8 or band_bottom - band_top < 4:
            continue
        band, scale = _band(upload, frame, band_top, band_bottom, left, right, CLOSE_SIDE)
        found = _band_boxes(band, scale, band_top, left, end)
        if on_card and end == "collector":
            # Across a known card the band's last rows are its collector end; the rows above them are the
            # rules text, which the first look read already and which settles nothing.
            last_rows = _rows_of([b for b, _ in found])[-COLLECTOR_ROWS:]
            found = [(b, end) for row in last_rows for b in row]
        lines += _read_crops([_crop(band, b.corners) for b, _ in found], found, careful=True)
    return lines


def lines_side_by_side(upload: Image.Image) -> bool:
    """Whether the whole upload's lines spread across several card widths (cards side by side): the
    look a read on the card alone cannot take, on a copy of ``SEVERAL_CARDS_SIDE`` pixels (at 480 the
    lines of a webcam photo of two cards were too small to find)."""
    small, scale = _resized(_to_rgb(upload), SEVERAL_CARDS_SIDE)
    raw = text_model.detect(small)
    along, down = _frame(text_direction(raw))
    aligned, spread = _spread(_boxes(raw, scale, np.zeros(2, dtype=np.float32), along, down))
    return CardText(aligned=aligned, spread=spread).side_by_side


def _cheap_read(upload: np.ndarray) -> CardText:
    small, scale = _resized(upload, CHEAP_DETECT_SIDE)
    raw = text_model.detect(small)
    angle = text_direction(raw)
    along, down = _frame(angle)
    rows = _rows_of(_boxes(raw, scale, np.zeros(2, dtype=np.float32), along, down))
    chosen = [(b, "title") for b in rows[0]] if len(rows) > 2 else []
    chosen += [(b, "collector") for row in rows[-2:] for b in row]
    result = CardText(rotation=_quarter_turns(angle), angle_deg=round(angle, 2),
                      detected=sum(len(row) for row in rows), passes=("cheap",))
    result.lines = _recognise(upload, chosen)
    return result


def _quarter_turns(angle_deg: float) -> int:
    """The text's direction rounded to a quarter turn: 0 upright, 90 the card lies turned clockwise, ..."""
    return int(round((angle_deg % 360.0) / 90.0)) % 4 * 90
