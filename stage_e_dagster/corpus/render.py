"""Render a card image from a printing, the way uploads vary: size, bleed, type size, blur, noise, encoding.

The bottom lines follow real cards in small type (1.5-2% of the card height): ``041/281 C`` over
``DMU • EN`` with the artist, or ``C 0100`` over ``FDN • EN``; old frames print ``Illus.`` and the
copyright line but no collector number.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ..stage_c.geometry import BLEED_MM, BOXES, TRIM_MM
from .art import render_art, render_symbol
from .catalogue import PrintingSpec

BORDER_RGB = {"black": (18, 18, 20), "white": (242, 242, 238), "silver": (168, 170, 174)}
RARITY_RGB = {"C": (20, 20, 20), "U": (150, 160, 175), "R": (200, 170, 60), "M": (220, 90, 30)}
_WORDS = ("target", "creature", "gets", "until", "end", "of", "turn", "draw", "a", "card", "flying",
          "each", "opponent", "loses", "life", "you", "may", "sacrifice", "destroy", "artifact")


@dataclass(frozen=True)
class Variant:
    height: int                 # pixels of the trimmed face
    bleed: bool = False
    type_frac: float = 0.0175   # bottom-line font size as a fraction of the face height
    blur: float = 0.0
    noise: float = 0.0
    jpeg_quality: int | None = 92   # None = PNG
    art_seed: int | None = None     # custom art when set
    proxy_marker: bool = False


@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=max(6, size))  # type: ignore[return-value]


def _frame_colour(p: PrintingSpec) -> tuple[int, int, int]:
    rng = random.Random(f"frame:{p.key}")
    return tuple(rng.randint(90, 200) for _ in range(3))  # type: ignore[return-value]


def _box(name: str, w: int, h: int) -> tuple[int, int, int, int]:
    left, top, right, bottom = BOXES[name]
    return round(left * w), round(top * h), round(right * w), round(bottom * h)


def bottom_lines(p: PrintingSpec) -> tuple[str, str]:
    """The two collector-block lines as printed (empty for old frames; the two bottom lines of a
    2008-2014 frame, whose number ends the legal line)."""
    lang = p.lang.upper()
    if p.style == "pre2015":
        number = f"{int(p.collector_number)}/{p.set_size} {p.rarity}"
        return f"Illus. {p.artist}", f"\u2122 & \u00a9 {p.released.year} Wizards of the Coast {number}"
    if p.style == "slash":
        return f"{int(p.collector_number):03d}/{p.set_size:03d} {p.rarity}", f"{p.set_code} \u2022 {lang}"
    if p.style == "rarity":
        return f"{p.rarity} {int(p.collector_number):04d}", f"{p.set_code} \u2022 {lang}"
    return "", ""


def _draw_brush(draw: ImageDraw.ImageDraw, x: float, y: float, size: int, colour: tuple[int, int, int]) -> float:
    """A small paintbrush mark before the artist's name; returns the x after it."""
    s = size * 0.7
    draw.line((x, y + s, x + s * 0.8, y + s * 0.2), fill=colour, width=max(1, size // 8))
    draw.ellipse((x + s * 0.6, y, x + s, y + s * 0.4), fill=colour)
    return x + s + size * 0.4


def _draw_set_line(draw: ImageDraw.ImageDraw, x: float, y: float, p: PrintingSpec,
                   font: ImageFont.FreeTypeFont, size: int, ink: tuple[int, int, int]) -> float:
    """``SET • LANG`` with the bullet drawn as a dot (the bundled font has no bullet); returns the end x."""
    draw.text((x, y), p.set_code, font=font, fill=ink)
    x += draw.textlength(p.set_code, font=font) + size * 0.35
    r = size * 0.13
    cy = y + size * 0.55
    draw.ellipse((x, cy - r, x + 2 * r, cy + r), fill=ink)
    x += 2 * r + size * 0.35
    lang = p.lang.upper()
    draw.text((x, y), lang, font=font, fill=ink)
    return x + draw.textlength(lang, font=font)


def render_face(p: PrintingSpec, v: Variant) -> Image.Image:
    """The trimmed card face for printing ``p`` (no bleed, blur, noise or encoding)."""
    h = v.height
    w = round(h * TRIM_MM[0] / TRIM_MM[1])
    borderless = p.border_color == "borderless"
    art_seed = v.art_seed if v.art_seed is not None else p.art_seed
    face = Image.new("RGB", (w, h), BORDER_RGB.get(p.border_color, (18, 18, 20)))
    draw = ImageDraw.Draw(face, "RGBA")
    frame = _frame_colour(p)
    if borderless:
        face.paste(render_art(art_seed, (w, h)))
        draw.rectangle((0, round(0.885 * h), w, h), fill=(10, 10, 12, 215))
    else:
        draw.rectangle((round(0.045 * w), round(0.04 * h), round(0.955 * w), round(0.885 * h)), fill=frame)
        al, at, ar, ab = _box("art", w, h)
        face.paste(render_art(art_seed, (ar - al, ab - at)), (al, at))
    light = (236, 230, 214, 235 if borderless else 255)
    draw.rectangle((round(0.06 * w), round(0.05 * h), round(0.94 * w), round(0.098 * h)), fill=light)
    draw.text((round(0.08 * w), round(0.058 * h)), p.name, font=_font(round(0.032 * h)), fill=(0, 0, 0))
    draw.rectangle((round(0.06 * w), round(0.562 * h), round(0.94 * w), round(0.616 * h)), fill=light)
    draw.text((round(0.08 * w), round(0.574 * h)), "Creature - Wanderer", font=_font(round(0.027 * h)),
              fill=(0, 0, 0))
    sl, st, sr, sb = _box("symbol", w, h)
    side = min(sr - sl, sb - st) - 4
    symbol = render_symbol(p.set_code, max(8, side), RARITY_RGB[p.rarity])
    face.paste(symbol, (sr - side - 6, st + (sb - st - side) // 2), symbol)
    draw.rectangle((round(0.07 * w), round(0.626 * h), round(0.93 * w), round(0.872 * h)),
                   fill=(244, 238, 224, 235 if borderless else 255))
    rng = random.Random(f"rules:{p.key}")
    body = _font(round(0.026 * h))
    for line in range(4):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 7)))
        draw.text((round(0.09 * w), round((0.645 + line * 0.05) * h)), words.capitalize() + ".", font=body,
                  fill=(0, 0, 0))

    ink = (0, 0, 0) if p.border_color in ("white", "silver") else (245, 245, 245)
    size = round(v.type_frac * h)
    font = _font(size)
    y1, y2 = round(0.902 * h), round(0.902 * h + size * 1.4)
    left, right = round(0.055 * w), round(0.945 * w)
    legal = f"\u2122 & \u00a9 {p.released.year} Wizards of the Coast"
    if p.style == "old":
        credit = f"Illus. {p.artist}"
        for y, text in ((y1, credit), (y2, legal.replace("\u2122 & ", ""))):
            tw = draw.textlength(text, font=font)
            draw.text(((w - tw) / 2, y), text, font=font, fill=ink)
    elif p.style == "pre2015":
        for y, text in zip((y1, y2), bottom_lines(p)):
            draw.text((left, y), text, font=font, fill=ink)
    else:
        line1, line2 = bottom_lines(p)
        draw.text((left, y1), line1, font=font, fill=ink)
        x = _draw_set_line(draw, left, y2, p, font, size, ink) + size * 0.8
        x = _draw_brush(draw, x, y2 + size * 0.15, size, ink)
        draw.text((x, y2), p.artist, font=font, fill=ink)
        draw.text((right - draw.textlength(legal, font=font), y2), legal, font=font, fill=ink)
    if v.proxy_marker:
        marker = "PROXY - NOT FOR SALE"
        draw.text((right - draw.textlength(marker, font=font), y1), marker, font=font, fill=ink)
    return face


def paint_symbol(face: Image.Image, glyph: Image.Image, ink: tuple[int, int, int] = (15, 15, 15)) -> Image.Image:
    """``face`` with a real set's icon (``glyph``, drawn where it is opaque, about 4 % of the card's height)
    in place of the made-up one at the type line's right end, inked as commons print it."""
    face = face.copy()
    w, h = face.size
    face.paste((236, 230, 214), (round(0.82 * w), round(0.565 * h), round(0.935 * w), round(0.613 * h)))
    face.paste(Image.new("RGB", glyph.size, ink),
               (round(0.885 * w - glyph.width / 2), round(0.589 * h - glyph.height / 2)), glyph)
    return face


def add_bleed(face: Image.Image) -> Image.Image:
    """Extend the face by 1/8 inch on every side, repeating its edge as print files do."""
    w, h = face.size
    mx = round(w * BLEED_MM / TRIM_MM[0])
    my = round(h * BLEED_MM / TRIM_MM[1])
    arr = np.pad(np.asarray(face), ((my, my), (mx, mx), (0, 0)), mode="edge")
    return Image.fromarray(arr)


def render_card(p: PrintingSpec, v: Variant, noise_seed: int = 0) -> Image.Image:
    """The full upload image: face, optional bleed, blur and noise."""
    img = render_face(p, v)
    if v.bleed:
        img = add_bleed(img)
    if v.blur > 0:
        img = img.filter(ImageFilter.GaussianBlur(v.blur))
    if v.noise > 0:
        rng = np.random.default_rng(noise_seed)
        arr = np.asarray(img).astype(np.float32) + rng.normal(0, v.noise, (img.height, img.width, 1))
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    return img


def encode(img: Image.Image, v: Variant) -> bytes:
    buf = io.BytesIO()
    if v.jpeg_quality is None:
        img.save(buf, format="PNG", optimize=False)
    else:
        img.save(buf, format="JPEG", quality=v.jpeg_quality)
    return buf.getvalue()
