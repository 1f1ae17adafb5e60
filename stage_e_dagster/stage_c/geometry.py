"""Card geometry: bleed classification from the aspect ratio and the fixed boxes of a card face.

Boxes are fractions of the trimmed card. A bleed image carries an extra 1/8 inch on every side,
so its boxes are remapped inward before they are scaled to pixels.
"""

from __future__ import annotations

from typing import Literal

TRIM_MM = (63.0, 88.0)
BLEED_MM = 3.175
TRIM_ASPECT = TRIM_MM[0] / TRIM_MM[1]
BLEED_ASPECT = (TRIM_MM[0] + 2 * BLEED_MM) / (TRIM_MM[1] + 2 * BLEED_MM)
ASPECT_TOLERANCE = 0.03

# Margin of a bleed image taken by the bleed, as a fraction of that image's width and height.
BLEED_MARGIN_X = BLEED_MM / (TRIM_MM[0] + 2 * BLEED_MM)
BLEED_MARGIN_Y = BLEED_MM / (TRIM_MM[1] + 2 * BLEED_MM)

BleedClass = Literal["bleed", "trimmed"]

# (left, top, right, bottom) as fractions of the trimmed card face.
BOXES: dict[str, tuple[float, float, float, float]] = {
    # Both printed bottom lines, full width: collector number, set and language, artist, copyright.
    "bottom_lines": (0.03, 0.892, 0.97, 0.972),
    "collector": (0.03, 0.892, 0.56, 0.972),
    "legal": (0.44, 0.892, 0.97, 0.972),
    "art": (0.075, 0.11, 0.925, 0.555),
    "symbol": (0.83, 0.562, 0.935, 0.618),
    # The name on the title bar, short of the mana cost; inside the bar's frame lines.
    "title": (0.07, 0.045, 0.72, 0.092),
}

Box = tuple[int, int, int, int]


def classify_bleed(width: int, height: int) -> BleedClass | None:
    """``bleed`` or ``trimmed`` by the nearer aspect ratio; None when neither is within tolerance."""
    if width <= 0 or height <= 0:
        return None
    aspect = width / height
    best: BleedClass = "trimmed" if abs(aspect - TRIM_ASPECT) <= abs(aspect - BLEED_ASPECT) else "bleed"
    target = TRIM_ASPECT if best == "trimmed" else BLEED_ASPECT
    return best if abs(aspect - target) <= ASPECT_TOLERANCE else None


def trim_box(width: int, height: int, bleed_class: BleedClass | None) -> Box:
    """The pixel box of the trimmed card face inside an image of this size."""
    if bleed_class != "bleed":
        return (0, 0, width, height)
    mx, my = round(width * BLEED_MARGIN_X), round(height * BLEED_MARGIN_Y)
    return (mx, my, width - mx, height - my)


def box_px(name: str, width: int, height: int, bleed_class: BleedClass | None) -> Box:
    """The named box in pixels for an image of this size and bleed class."""
    left, top, right, bottom = trim_box(width, height, bleed_class)
    fl, ft, fr, fb = BOXES[name]
    tw, th = right - left, bottom - top
    return (
        left + round(fl * tw),
        top + round(ft * th),
        left + round(fr * tw),
        top + round(fb * th),
    )


def all_boxes(width: int, height: int, bleed_class: BleedClass | None) -> dict[str, list[int]]:
    return {name: list(box_px(name, width, height, bleed_class)) for name in BOXES}
