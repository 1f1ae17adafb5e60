"""Builders that put a small real catalogue, cards and evidence rows into a test database."""

from __future__ import annotations

import itertools
from datetime import date
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Card, Expansion, ImageEvidence, Printing
from stage_e_dagster.stage_c.manifest import MANIFEST_VERSIONS
from stage_e_dagster.stage_d.names import normalize_name

_seq = itertools.count(1)


class CatalogueBuilder:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.expansions: dict[str, int] = {}

    def expansion(self, code: str, released: date = date(2020, 1, 1), printed_size: int | None = None) -> int:
        """A set; ``printed_size`` is the total it prints after the number (Scryfall's printed_size)."""
        if code not in self.expansions:
            with Session(self.engine) as s, s.begin():
                exp = Expansion(code=code, name=f"Set {code}", released_at=released, printed_size=printed_size)
                s.add(exp)
                s.flush()
                self.expansions[code] = exp.id
        return self.expansions[code]

    def printing(self, name: str, code: str, number: str, *, lang: str = "en", artist: str | None = "Ann Artist",
                 border: str | None = "black", frame: str | None = "2015", released: date | None = None,
                 art_phash: int | None = None, printed_name: str | None = None) -> int:
        exp_id = self.expansion(code)
        with Session(self.engine) as s, s.begin():
            p = Printing(expansion_id=exp_id, name=name, normalized_name=normalize_name(name),
                         collector_number=number, lang=lang, artist=artist, border_color=border, frame=frame,
                         layout="normal", released_at=released, art_phash=art_phash, printed_name=printed_name)
            s.add(p)
            s.flush()
            return p.id

    def card(self, name: str, *, content_hash: str | None = None, card_type: str = "card", dpi: int | None = 300,
             evidence: dict[str, Any] | None = None, identifier: str | None = None) -> int:
        n = next(_seq)
        chash = content_hash or f"sha256:{n:064x}"
        with Session(self.engine) as s, s.begin():
            card = Card(identifier=identifier or f"card-{n}", name=name, image_locator=f"file:///img/{n}.jpg",
                        card_type=card_type, dpi=dpi, content_hash=chash, stage_c_pending=evidence is None,
                        stage_d_pending=evidence is not None)
            s.add(card)
            s.flush()
            if evidence is not None:
                s.add(make_evidence(card.id, chash, **evidence))
            return card.id


def printed_collector_text(set_code: str | None, number: str | None) -> str | None:
    """The bottom-line text Stage C would have stored for a clean read of this set code and number."""
    if number is None:
        return None
    return f"{number}/281 C\n{set_code.upper()} \u2022 EN" if set_code else f"{number}/281 C"


def printed_word_boxes(text: str | None, conf: float = 96.0) -> list[dict[str, Any]] | None:
    """Word boxes of that text, each read with ``conf``."""
    if text is None:
        return None
    return [{"text": word, "left": 10 * i, "top": 0, "width": 9, "height": 9, "conf": conf}
            for i, word in enumerate(text.split())]


def make_evidence(card_id: int, content_hash: str, **fields: Any) -> ImageEvidence:
    """An evidence row; the raw text and word boxes default to a clean, confident read of the
    given set code and number, and the border to one read confidently on the card."""
    values: dict[str, Any] = {
        "fetch_ok": True, "terminal": False, "is_truncated": False, "layout_class": "black",
        "layout_confidence": 0.9,
        "bleed_class": "trimmed", "collector_set_code": None, "collector_number": None,
        "collector_language": None, "artist_name": None, "illus_anchor_fired": False,
        "copyright_year": None, "proxy_marker": False, "art_phash": None, "symbol_phash": None,
    }
    values.update(fields)
    if "collector_line_raw_text" not in fields:
        values["collector_line_raw_text"] = printed_collector_text(values["collector_set_code"],
                                                                  values["collector_number"])
    if "collector_word_boxes" not in fields:
        values["collector_word_boxes"] = printed_word_boxes(values["collector_line_raw_text"])
    return ImageEvidence(card_id=card_id, content_hash=content_hash, extractor_versions=dict(MANIFEST_VERSIONS),
                         skip_reasons={}, writer="test", **values)
