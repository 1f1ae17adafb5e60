"""Procedural card art: distinct, low-frequency pictures whose perceptual hashes stay apart."""

from __future__ import annotations

import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

ART_BASE = (320, 240)


def render_art(seed: int, size: tuple[int, int]) -> Image.Image:
    """The picture for ``seed``, drawn once at a fixed base size and resized, so every scale shows the same art."""
    rng = random.Random(seed)
    w, h = ART_BASE
    top = np.array([rng.randrange(256) for _ in range(3)], dtype=np.float32)
    bottom = np.array([rng.randrange(256) for _ in range(3)], dtype=np.float32)
    ramp = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    pixels = (top * (1 - ramp) + bottom * ramp) * np.ones((h, w, 3), dtype=np.float32)
    img = Image.fromarray(pixels.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(5, 10)):
        colour = tuple(rng.randrange(256) for _ in range(3))
        x, y = rng.uniform(-0.2, 1.0) * w, rng.uniform(-0.2, 1.0) * h
        rw, rh = rng.uniform(0.15, 0.6) * w, rng.uniform(0.15, 0.6) * h
        if rng.random() < 0.5:
            draw.ellipse((x, y, x + rw, y + rh), fill=colour)
        else:
            points = [(x + rng.uniform(0, rw), y + rng.uniform(0, rh)) for _ in range(rng.randint(3, 6))]
            draw.polygon(points, fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(2))
    return img.resize(size, Image.Resampling.LANCZOS)


def render_symbol(set_code: str, size: int, colour: tuple[int, int, int]) -> Image.Image:
    """A set symbol glyph derived from the set code, on a transparent background."""
    rng = random.Random(f"symbol:{set_code}")
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    points = []
    n = rng.randint(5, 9)
    for k in range(n):
        angle = 2 * np.pi * k / n
        radius = size * rng.uniform(0.2, 0.48)
        points.append((size / 2 + radius * np.cos(angle), size / 2 + radius * np.sin(angle)))
    draw.polygon(points, fill=colour + (255,), outline=(0, 0, 0, 255))
    return img
