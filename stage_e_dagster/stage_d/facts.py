"""Per-batch metadata of candidate printings, read only for the candidates a batch needs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.collector_line import normalize_collector_number
from ..catalog.models import Expansion, Printing

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
    printed_size: int | None = None   # the set's printed total ("041/281" -> 281), when Scryfall gives one
    printed_name: str | None = None   # the name as printed in this printing's language
    symbol_shape: bytes | None = None  # the set symbol's silhouette (stage_d/symbols.py); None: none rendered


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
                Expansion.printed_size, Printing.printed_name, Expansion.symbol_shape,
            )
            .join(Expansion, Expansion.id == Printing.expansion_id)
            .where(Printing.id.in_(ids[start:start + _IN_CHUNK]))
        )
        for pid, code, number, lang, artist, border, frame, released, art, printed_size, printed_name, symbol in rows:
            facts[pid] = PrintingFacts(
                id=pid, set_code=code.lower(), number_key=normalize_collector_number(number),
                lang=(lang or "en").lower(), artist=artist, border_color=(border or None),
                frame=(frame or None), released_at=released, art_phash=art, printed_size=printed_size,
                printed_name=printed_name, symbol_shape=symbol,
            )
    return facts


def complete_set_codes(session: Session, codes: Iterable[str]) -> frozenset[str]:
    """The set codes among ``codes`` whose every card the catalogue holds, so that "this set has no
    printing of the name" can be believed.

    A set is complete when the printings imported for it reach the card count Scryfall gives for
    the set (``Expansion.card_count``, from Scryfall's sets data); a set without that count never is.
    """
    wanted = sorted({c.lower() for c in codes if c})
    if not wanted:
        return frozenset()
    complete: set[str] = set()
    for start in range(0, len(wanted), _IN_CHUNK):
        rows = session.execute(
            sa.select(Expansion.code)
            .join(Printing, Printing.expansion_id == Expansion.id)
            .where(sa.func.lower(Expansion.code).in_(wanted[start:start + _IN_CHUNK]),
                   Expansion.card_count.is_not(None), Expansion.card_count > 0)
            .group_by(Expansion.id, Expansion.code, Expansion.card_count)
            .having(sa.func.count(sa.distinct(Printing.collector_number)) >= Expansion.card_count)
        ).scalars()
        complete.update(code.lower() for code in rows)
    return frozenset(complete)
