"""Per-batch metadata of candidate printings, read only for the candidates a batch needs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import Expansion, Printing
from .names import normalize_collector_number

_IN_CHUNK = 900


@dataclass(frozen=True)
class PrintingFacts:
    id: int
    set_code: str
    number_key: str
    lang: str
    artist: str | None
    border_color: str | None
    frame: str | None
    released_at: date | None
    art_phash: int | None


def load_printing_facts(session: Session, printing_ids: Iterable[int]) -> dict[int, PrintingFacts]:
    """Facts for exactly these printings; the release date falls back to the expansion's."""
    ids = sorted(set(printing_ids))
    facts: dict[int, PrintingFacts] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        rows = session.execute(
            sa.select(
                Printing.id, Expansion.code, Printing.collector_number, Printing.lang, Printing.artist,
                Printing.border_color, Printing.frame,
                sa.func.coalesce(Printing.released_at, Expansion.released_at), Printing.art_phash,
            )
            .join(Expansion, Expansion.id == Printing.expansion_id)
            .where(Printing.id.in_(ids[start:start + _IN_CHUNK]))
        )
        for pid, code, number, lang, artist, border, frame, released, art in rows:
            facts[pid] = PrintingFacts(
                id=pid, set_code=code.lower(), number_key=normalize_collector_number(number),
                lang=(lang or "en").lower(), artist=artist, border_color=(border or None),
                frame=(frame or None), released_at=released, art_phash=art,
            )
    return facts
