"""Keyrune's set icons as tests use them: read where they lie (``../shared/fixtures/set-symbols``, GPL-3.0,
evaluation input never copied into the project); tests that need them skip without them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import resvg_py
from PIL import Image

SYMBOLS = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "set-symbols"
needs_symbols = pytest.mark.skipif(not SYMBOLS.is_dir(), reason=f"the set symbols are not at {SYMBOLS}")


def keyrune_glyph(code: str, side: int) -> Image.Image:
    """Keyrune's icon of the set ``code``, drawn ``side`` pixels high."""
    png = resvg_py.svg_to_bytes(svg_path=str(SYMBOLS / f"{code}.svg"), height=side, skip_system_fonts=True)
    return Image.open(io.BytesIO(bytes(png))).convert("RGBA")
