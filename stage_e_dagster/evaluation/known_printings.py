"""The real printings of the names the photo folders show, for decoys a careless vote could fall for.

A vote on an old frame is only tested when the catalogue holds the printings it could be confused
with: the same name in other sets, with other borders and other years. ``known_printings.csv``
(beside this module; where each row comes from is in ``KNOWN_PRINTINGS.md``) lists them, one row per
printing: ``name``, ``set``, ``collector_number``, ``released``, ``border_color``, ``frame``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ..stage_d.names import normalize_name
from .labels import LabelFileError, read_csv_rows

KNOWN_PRINTINGS = Path(__file__).with_name("known_printings.csv")
COLUMNS = ("name", "set", "collector_number", "released", "border_color", "frame")


@dataclass(frozen=True)
class KnownPrinting:
    name: str
    set_code: str
    number: str           # blank when the source gives none
    released: date | None
    border: str | None
    frame: str | None


def load_known_printings(path: Path = KNOWN_PRINTINGS) -> dict[str, list[KnownPrinting]]:
    """Known printings by normalised name, in file order; a malformed file is a :class:`LabelFileError`."""
    rows = read_csv_rows(path, COLUMNS, "known printings")
    known: dict[str, list[KnownPrinting]] = defaultdict(list)
    for line, row in enumerate(rows, start=2):
        name, code = (row.get("name") or "").strip(), (row.get("set") or "").strip().lower()
        if not name or not code:
            raise LabelFileError(f"{path}:{line}: empty name or set")
        released = (row.get("released") or "").strip()
        try:
            day = date.fromisoformat(released) if released else None
        except ValueError:
            raise LabelFileError(f"{path}:{line}: released {released!r} is not YYYY-MM-DD") from None
        known[normalize_name(name)].append(KnownPrinting(
            name=name, set_code=code, number=(row.get("collector_number") or "").strip(), released=day,
            border=(row.get("border_color") or "").strip().lower() or None,
            frame=(row.get("frame") or "").strip() or None))
    return dict(known)
