"""Give expansions the shape of their set symbol, rendered from the SVG icon Scryfall links.

Stage D tells printings of one name apart by the symbol a card prints, but reads only what is stored:
this fetches each set's ``icon_svg_uri`` (stored by the importer) once, renders it with resvg (a
self-contained wheel: no system libraries), and stores the silhouette as
:mod:`~stage_e_dagster.catalog.symbol_shape` makes it, with the URI it came from. Every request
goes through Stage C's guarded :class:`~stage_e_dagster.stage_c.fetch.ImageFetcher`, as art crops
do (allow-list, global pacer, byte ceiling); a 403, or a host the settings refuse, stops the run.

Resumable and idempotent, like ``art_hashes``: a set is pending while it has an icon URI and no shape,
or a shape from another URI (Scryfall's URIs carry the icon's version). A failed fetch stays pending;
an icon that is not a renderable SVG is counted as ``bad-svg`` and stays pending too.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import resvg_py
import sqlalchemy as sa
from PIL import Image

from ..catalog.models import Expansion
from ..catalog.symbol_shape import shape_descriptor
from ..stage_c.fetch import THROTTLED, ImageFetcher
from .art_hashes import SCRYFALL_RATE_PER_SEC, fetched_body, pending_rows

__all__ = ["BAD_SVG", "SCRYFALL_RATE_PER_SEC", "SymbolReport", "SymbolSvgError", "count_pending", "fetch_symbols",
           "store_symbol_svg", "svg_symbol_shape"]

BAD_SVG = "bad-svg"
RENDER_HEIGHT = 128  # pixels the icon is drawn at before it is cut to its box and scaled to the descriptor


class SymbolSvgError(ValueError):
    """The icon is not an SVG resvg can draw, or draws nothing."""


@dataclass
class SymbolReport:
    """What one ``fetch-symbols`` run did; ``stopped`` names why it ended early (``lockout``, ``host-not-allowed``)."""

    pending: int = 0
    rendered: int = 0
    throttled: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # by error class: not-found, timeout, bad-svg, ...
    stopped: str | None = None
    stop_detail: str | None = None
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"pending": self.pending, "rendered": self.rendered, "throttled": self.throttled,
                "failed": dict(sorted(self.failed.items())), "stopped": self.stopped,
                "stop_detail": self.stop_detail, "elapsed_s": round(self.elapsed_s, 3)}


def svg_symbol_shape(svg: bytes) -> bytes:
    """The stored descriptor of an SVG icon: drawn where it is opaque. Raises :class:`SymbolSvgError`."""
    try:
        text = svg.decode("utf-8-sig")
        png = resvg_py.svg_to_bytes(svg_string=text, height=RENDER_HEIGHT, skip_system_fonts=True)
        with Image.open(io.BytesIO(bytes(png))) as img:
            alpha = np.asarray(img.convert("RGBA"))[:, :, 3]
    except (UnicodeDecodeError, ValueError, OSError) as exc:  # resvg raises ValueError on a bad document
        raise SymbolSvgError(f"{BAD_SVG}: {exc}") from exc
    descriptor = shape_descriptor(alpha >= 128)
    if descriptor is None:
        raise SymbolSvgError(f"{BAD_SVG}: the icon draws nothing")
    return descriptor


def store_symbol_svg(engine: sa.Engine, set_code: str, svg: bytes, *, uri: str | None = None) -> bool:
    """Render ``svg`` and store it as the symbol of the set ``set_code``; False when the catalogue has no
    such set. ``uri`` is where it came from (None: a local file, never re-fetched). Raises
    :class:`SymbolSvgError` for an icon that cannot be drawn."""
    descriptor = svg_symbol_shape(svg)
    with engine.begin() as conn:
        return bool(conn.execute(
            sa.update(Expansion).where(Expansion.code == set_code.lower())
            .values(symbol_shape=descriptor, symbol_shape_uri=uri)
        ).rowcount)


def store_symbol_folder(engine: sa.Engine, folder: Path) -> dict[str, str]:
    """Store every ``<set code>.svg`` of ``folder`` as that set's symbol (``stage-e evaluate``'s stand-in
    for Scryfall's icons); returns what became of each file: ``stored``, ``no-such-set`` or ``bad-svg``."""
    outcomes: dict[str, str] = {}
    for path in sorted(folder.glob("*.svg")):
        code = path.stem.rstrip("_")  # Keyrune names Conflux con_.svg (CON is a reserved name on Windows)
        try:
            outcomes[code] = "stored" if store_symbol_svg(engine, code, path.read_bytes()) else "no-such-set"
        except SymbolSvgError:
            outcomes[code] = BAD_SVG
    return outcomes


def _pending() -> Any:
    return sa.and_(
        Expansion.symbol_svg_uri.is_not(None),
        sa.or_(Expansion.symbol_shape.is_(None),
               sa.and_(Expansion.symbol_shape_uri.is_not(None),
                       Expansion.symbol_shape_uri != Expansion.symbol_svg_uri)),
    )


def count_pending(engine: sa.Engine) -> int:
    """Sets that ``fetch_symbols`` would fetch."""
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(Expansion).where(_pending())).scalar_one())


def fetch_symbols(engine: sa.Engine, fetcher: ImageFetcher, *, limit: int | None = None,
                  progress: Callable[[int], None] | None = None) -> SymbolReport:
    """Fetch, render and store the icon of every pending set (at most ``limit``), one commit per set.

    Several sets share one icon (a promo set shows its parent's): each URI is fetched once a run.
    ``progress`` is told of each set tried. Stops at the first 403 or when the settings refuse the
    host; the shapes stored before it stay.
    """
    report = SymbolReport(pending=count_pending(engine))
    started = time.perf_counter()
    rendered: dict[str, bytes | str] = {}  # URI -> descriptor, or the error class it failed with
    try:
        for expansion_id, uri in pending_rows(engine, Expansion.id, Expansion.symbol_svg_uri, _pending(), limit):
            if uri not in rendered:
                outcome = _fetch_one(fetcher, uri, report)
                if outcome is None:
                    return report
                rendered[uri] = outcome
            _store(engine, expansion_id, uri, rendered[uri], report)
            if progress is not None:
                progress(1)
    finally:
        report.elapsed_s = time.perf_counter() - started
    return report


def _fetch_one(fetcher: ImageFetcher, uri: str, report: SymbolReport) -> bytes | str | None:
    """One icon's descriptor, or the error class it failed with (``THROTTLED``: the set stays pending); None
    when the run must stop."""
    body = fetched_body(fetcher, uri, report)
    if body is None or isinstance(body, str):
        return body
    try:
        return svg_symbol_shape(body)
    except SymbolSvgError:
        return BAD_SVG


def _store(engine: sa.Engine, expansion_id: int, uri: str, outcome: bytes | str, report: SymbolReport) -> None:
    if outcome == THROTTLED:
        report.throttled += 1
        return
    if isinstance(outcome, str):
        report.failed[outcome] += 1
        return
    with engine.begin() as conn:
        # Only while the set still points at this URI: a re-import in between may have moved it.
        report.rendered += conn.execute(
            sa.update(Expansion).where(Expansion.id == expansion_id, Expansion.symbol_svg_uri == uri)
            .values(symbol_shape=outcome, symbol_shape_uri=uri)
        ).rowcount
