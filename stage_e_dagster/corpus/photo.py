"""Photo-like uploads: a rendered card face put on a table or a cluttered desk, tilted in
perspective, in a sleeve, under glare stripes, blurred, shrunk and JPEG-encoded, the ways real
phone photos differ from clean scans.

Each photo-like card varies one condition from a baseline (a 2015-2022 black-bordered English
card lying straight on a plain table, filling most of the frame), so a condition that fails
shows as its own row in the per-condition scores. :data:`CONDITIONS` lists them; a condition
either asks for a kind of printing (collector-line format, border, language) or for a way of
photographing it.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from .catalogue import PrintingSpec
from .render import Variant, render_face

# What kind of printing each condition photographs (style, border, language); the rest use the baseline's.
Wanted = Callable[[PrintingSpec], bool]


def _baseline(p: PrintingSpec) -> bool:
    return p.style == "slash" and p.border_color == "black" and p.lang == "en"


PRINTINGS: dict[str, Wanted] = {
    "baseline": _baseline,
    "format-pre2015": lambda p: p.style == "pre2015" and p.border_color == "black" and p.lang == "en",
    "format-2015": _baseline,
    "format-2023": lambda p: p.style == "rarity" and p.border_color == "black" and p.lang == "en",
    "format-old": lambda p: p.style == "old" and p.border_color == "black" and p.lang == "en",
    "border-black": lambda p: p.style != "old" and p.border_color == "black" and p.lang == "en",
    "border-white": lambda p: p.border_color == "white" and p.lang == "en",
    "border-borderless": lambda p: p.style != "old" and p.border_color == "borderless" and p.lang == "en",
    "lang-other": lambda p: p.style in ("slash", "rarity") and p.border_color == "black" and p.lang != "en",
}


@dataclass(frozen=True)
class Photo:
    """How one photo-like card is photographed; stored in its label."""

    card_height: int = 1000          # pixels of the card face in the photo
    fill: float = 0.86               # card height / photo height
    background: str = "table"        # table | clutter
    tilt: float = 0.0                # corner displacement, as a fraction of the card width
    rotation: float = 0.0            # degrees
    sleeve: bool = False
    glare_stripes: int = 0
    blur: float = 0.0
    noise: float = 2.0
    jpeg_quality: int = 88


def photo_for(condition: str, rng: random.Random) -> Photo:
    """The photo settings of one card of ``condition``: the baseline, changed in the one way it names."""
    base = Photo(card_height=rng.randint(900, 1100), fill=rng.uniform(0.82, 0.9), rotation=rng.uniform(-1.0, 1.0))
    changes: dict[str, dict[str, Any]] = {
        "tilt": {"tilt": rng.uniform(0.05, 0.09), "rotation": rng.uniform(-6, 6)},
        "blur": {"blur": rng.uniform(1.6, 2.4)},
        "glare": {"glare_stripes": rng.randint(1, 3)},
        "sleeve": {"sleeve": True},
        "clutter": {"background": "clutter", "fill": rng.uniform(0.6, 0.72), "rotation": rng.uniform(-4, 4)},
        "jpeg": {"jpeg_quality": rng.randint(25, 40)},
        "low-res": {"card_height": rng.randint(380, 480)},
        # All of them at once, mildly: what a quick phone photo of a sleeved card on a desk looks like.
        "phone-photo": {"card_height": rng.randint(600, 800), "tilt": rng.uniform(0.02, 0.04),
                        "rotation": rng.uniform(-3, 3), "blur": rng.uniform(0.6, 1.0), "glare_stripes": 1,
                        "sleeve": rng.random() < 0.5, "jpeg_quality": rng.randint(65, 80),
                        "background": rng.choice(("table", "clutter")), "fill": rng.uniform(0.7, 0.85)},
    }
    values = asdict(base)
    values.update(changes.get(condition, {}))
    return Photo(**values)


PHOTO_CONDITIONS = ("tilt", "blur", "glare", "sleeve", "clutter", "jpeg", "low-res", "phone-photo")
CONDITIONS = (*PRINTINGS, *PHOTO_CONDITIONS)


def wanted_printing(condition: str) -> Wanted:
    return PRINTINGS.get(condition, _baseline)


def _table(size: tuple[int, int], rng: random.Random) -> Image.Image:
    """A plain surface: one colour with a soft gradient, like a desk under a lamp."""
    w, h = size
    colour = np.array([rng.randint(60, 190) for _ in range(3)], dtype=np.float32)
    ramp = np.linspace(0.85, 1.1, w, dtype=np.float32)[None, :, None]
    arr = np.clip(colour * ramp * np.ones((h, w, 3), dtype=np.float32), 0, 255)
    return Image.fromarray(arr.astype(np.uint8))


def _clutter(size: tuple[int, int], rng: random.Random) -> Image.Image:
    """A busy desk: papers, other objects, printed text and lines in many colours."""
    img = _table(size, rng)
    draw = ImageDraw.Draw(img)
    w, h = size
    for _ in range(rng.randint(25, 45)):
        colour = tuple(rng.randrange(256) for _ in range(3))
        x, y = rng.uniform(-0.1, 1.0) * w, rng.uniform(-0.1, 1.0) * h
        rw, rh = rng.uniform(0.05, 0.35) * w, rng.uniform(0.05, 0.35) * h
        kind = rng.random()
        if kind < 0.4:
            draw.rectangle((x, y, x + rw, y + rh), fill=colour)
        elif kind < 0.7:
            draw.ellipse((x, y, x + rw, y + rh), fill=colour)
        elif kind < 0.85:
            draw.line((x, y, x + rw, y + rh), fill=colour, width=rng.randint(2, 12))
        else:
            draw.text((x, y), "".join(rng.choice("ABCDEFGHIJ0123456789 /") for _ in range(18)), fill=colour,
                      font_size=rng.randint(14, 40))
    return img


def _in_sleeve(face: Image.Image, rng: random.Random) -> Image.Image:
    """The face inside a sleeve: a coloured rim around it and a hazy, slightly brightened front."""
    w, h = face.size
    rim = round(0.03 * w)
    colour = rng.choice(((20, 20, 24), (120, 20, 30), (25, 40, 110), (200, 200, 205)))
    sleeve = Image.new("RGB", (w + 2 * rim, h + 2 * rim), colour)
    hazy = Image.blend(face, Image.new("RGB", face.size, (235, 238, 242)), 0.12)
    sleeve.paste(hazy, (rim, rim))
    return sleeve


def _perspective_coeffs(dst: list[tuple[float, float]], src: list[tuple[float, float]]) -> list[float]:
    """PIL's PERSPECTIVE coefficients mapping output points ``dst`` back to input points ``src``."""
    rows = []
    for (x, y), (u, v) in zip(dst, src):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
    a = np.array(rows, dtype=np.float64)
    b = np.array([c for point in src for c in point], dtype=np.float64)
    return list(np.linalg.solve(a, b))


def _glare(img: Image.Image, stripes: int, rng: random.Random) -> Image.Image:
    """Bright diagonal bands with soft edges, as a window or lamp reflects off a glossy card."""
    w, h = img.size
    mask = Image.new("L", img.size, 0)
    draw = ImageDraw.Draw(mask)
    for _ in range(stripes):
        x = rng.uniform(-0.2, 0.9) * w
        width = rng.uniform(0.05, 0.14) * w
        slant = rng.uniform(0.2, 0.6) * w
        draw.polygon([(x, 0), (x + width, 0), (x + width + slant, h), (x + slant, h)],
                     fill=rng.randint(120, 190))
    mask = mask.filter(ImageFilter.GaussianBlur(w * 0.02))
    return Image.composite(Image.new("RGB", img.size, (252, 252, 250)), img, mask)


def photograph(p: PrintingSpec, photo: Photo, *, seed: int) -> tuple[Image.Image, list[tuple[float, float]]]:
    """The photo of printing ``p`` and the card's four corners in it (clockwise from top left)."""
    rng = random.Random(f"photo:{seed}")
    face = render_face(p, Variant(height=photo.card_height))
    if photo.sleeve:
        face = _in_sleeve(face, rng)
    fw, fh = face.size
    ph = round(fh / photo.fill)
    pw = round(ph * 0.8)
    background = (_clutter if photo.background == "clutter" else _table)((pw, ph), rng)
    cx, cy = pw / 2 + rng.uniform(-0.03, 0.03) * pw, ph / 2 + rng.uniform(-0.03, 0.03) * ph
    angle = np.radians(photo.rotation)
    corners = []
    for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
        x, y = sx * fw / 2, sy * fh / 2
        x, y = x * np.cos(angle) - y * np.sin(angle), x * np.sin(angle) + y * np.cos(angle)
        jx, jy = (rng.uniform(-1, 1) * photo.tilt * fw for _ in range(2))
        corners.append((float(cx + x + jx), float(cy + y + jy)))
    src = [(0.0, 0.0), (float(fw), 0.0), (float(fw), float(fh)), (0.0, float(fh))]
    coeffs = _perspective_coeffs(corners, src)
    warped = face.transform((pw, ph), Image.Transform.PERSPECTIVE, coeffs, Image.Resampling.BICUBIC)
    mask = Image.new("L", (pw, ph), 0)
    ImageDraw.Draw(mask).polygon(corners, fill=255)
    img = Image.composite(warped, background, mask)
    if photo.glare_stripes:
        img = _glare(img, photo.glare_stripes, rng)
    if photo.blur > 0:
        img = img.filter(ImageFilter.GaussianBlur(photo.blur))
    if photo.noise > 0:
        noise = np.random.default_rng(seed).normal(0, photo.noise, (ph, pw, 1))
        img = Image.fromarray(np.clip(np.asarray(img).astype(np.float32) + noise, 0, 255).astype(np.uint8))
    return img, corners
