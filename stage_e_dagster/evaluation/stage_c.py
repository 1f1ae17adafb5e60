"""Stage C accuracy against labels: collector number, set code, bleed class and border colour
(plus the artist credit and copyright year when the labels carry them).

A field counts only for labelled cards that carry it (a printed collector line, a readable
file); a labelled card with no current evidence counts as wrong, so gaps show in the figure.
"""

from __future__ import annotations

from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.collector_line import normalize_collector_number
from ..catalog.models import Card, ImageEvidence
from ..stage_c.current import present_evidence


def _ratio(correct: int, total: int) -> float | None:
    return round(correct / total, 4) if total else None


def _cards_by_identifier(session: Session, identifiers: list[str]) -> dict[str, Card]:
    found: dict[str, Card] = {}
    for start in range(0, len(identifiers), 500):
        chunk = identifiers[start:start + 500]
        for card in session.execute(sa.select(Card).where(Card.identifier.in_(chunk))).scalars():
            found[card.identifier] = card
    return found


def _readable(label: dict[str, Any]) -> bool:
    return not label.get("broken")


CHECKS: dict[str, tuple[Callable[[dict[str, Any]], bool], Callable[[dict[str, Any], ImageEvidence], bool]]] = {
    "collector_number": (
        lambda lb: _readable(lb) and bool(lb.get("collector_number")) and lb.get("collector_line_printed", True),
        lambda lb, ev: (ev.collector_number is not None
                        and normalize_collector_number(ev.collector_number)
                        == normalize_collector_number(str(lb["collector_number"]))),
    ),
    "set_code": (  # a 2008-2014 frame prints a number but no set code: ``set_code_printed`` false
        lambda lb: _readable(lb) and bool(lb.get("set_code"))
        and lb.get("set_code_printed", lb.get("collector_line_printed", True)),
        lambda lb, ev: (ev.collector_set_code or "").lower() == str(lb["set_code"]).lower(),
    ),
    "bleed": (
        lambda lb: _readable(lb) and bool(lb.get("bleed_class")),
        lambda lb, ev: ev.bleed_class == lb["bleed_class"],
    ),
    "border": (
        lambda lb: _readable(lb) and bool(lb.get("border_color")),
        lambda lb, ev: ev.layout_class == lb["border_color"],
    ),
    "artist": (
        lambda lb: _readable(lb) and bool(lb.get("artist")),
        lambda lb, ev: (ev.artist_name or "").casefold() == str(lb["artist"]).casefold(),
    ),
    "copyright_year": (
        lambda lb: _readable(lb) and bool(lb.get("copyright_year")),
        lambda lb, ev: ev.copyright_year == int(lb["copyright_year"]),
    ),
}
_LABEL_FIELD = {"bleed": "bleed_class", "border": "border_color"}
_EVIDENCE_FIELD = {"collector_number": "collector_number", "set_code": "collector_set_code", "bleed": "bleed_class",
                   "border": "layout_class", "artist": "artist_name", "copyright_year": "copyright_year"}


def evaluate_stage_c(engine: sa.Engine, labels: list[dict[str, Any]], *,
                     misses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Accuracy figures and counts; ``misses`` (when given) collects each wrong field for inspection."""
    counts = {name: [0, 0] for name in CHECKS}
    with Session(engine) as session:
        cards = _cards_by_identifier(session, [lb["identifier"] for lb in labels])
        evidence = present_evidence(session, [c.id for c in cards.values()])
    terminal = with_evidence = 0
    for label in labels:
        card = cards.get(label["identifier"])
        ev = evidence.get(card.id) if card is not None else None
        if ev is not None:
            with_evidence += 1
            terminal += ev.terminal
        for name, (applies, correct) in CHECKS.items():
            if not applies(label):
                continue
            counts[name][1] += 1
            ok = ev is not None and not ev.terminal and correct(label, ev)
            counts[name][0] += ok
            if not ok and misses is not None:
                misses.append({"identifier": label["identifier"], "field": name,
                               "expected": label.get(_LABEL_FIELD.get(name, name)),
                               "found": None if ev is None else getattr(ev, _EVIDENCE_FIELD[name])})
    result: dict[str, Any] = {}
    for name, (correct, total) in counts.items():
        result[f"{name}_accuracy"] = _ratio(correct, total)
        result[f"{name}_correct"] = correct
        result[f"{name}_total"] = total
    result.update(
        cards_labelled=len(labels),
        cards_in_catalogue=len(cards),
        cards_with_evidence=with_evidence,
        terminal_records=terminal,
        broken_files_labelled=sum(1 for lb in labels if lb.get("broken")),
    )
    return result
