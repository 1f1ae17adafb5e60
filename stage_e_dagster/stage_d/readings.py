"""How strongly a card's stored bottom-line text supports the set code, number and year parsed from it.

Stage C stores the parse together with the raw text and word boxes of the read that produced it.
Looking back at that text tells a set code printed as read from one repaired through look-alike
glyphs, a number printed in a collector form ("041/281", "C 0100") from a bare number that frame
junk reads like, the set size printed after the number, a letter read for the number's first
digit ("t74/274"), and a marked copyright year from a stray one. The number forms and look-alikes
are the shared collector-line table's (``catalog/collector_line.py``), the ones Stage C parsed with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..catalog.collector_line import (
    DIGIT_LOOKALIKES,
    FORM_RARITY,
    FORM_SLASH,
    LEADING_DIGIT_LOOKALIKES,
    MIN_PRINTED_TOTAL,
    RARITY_NUMBER,
    SLASH_NUMBER,
    marked_years,
    parse_collector_rows,
)

# Recogniser confidence (0-100: Stage C stores a line's score times 100) at which one read of a set code
# counts as confirmed.
STRONG_WORD_CONFIDENCE = 90.0
# Bullets that OCR glues to the end of a set code ("DMUe EN").
_BULLET_LETTERS = "eoa"
_TOKEN = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class RepairedNumber:
    """A number read with a letter for its first digit ("t74/274"), as the digit it looks like ("174"),
    with the total printed beside it. Only a guess until the catalogue has it for the card's name."""

    number: str        # normalised
    printed: str       # as read, letter included
    total: int | None


@dataclass(frozen=True)
class CollectorReading:
    """What the stored text says about the parsed set code and number."""

    set_code_as_printed: bool        # the code is a whole token of the text, in capitals (a bullet peeled off)
    set_code_confidence: float | None  # best confidence of a line holding it as printed
    number_in_collector_form: bool   # the number is printed over a set size or after a rarity letter
    printed_total: int | None = None  # the set size printed after the number ("041/281" -> 281)
    repairs: tuple[RepairedNumber, ...] = ()  # look-alike repairs of a letter read before the number

    @property
    def set_code_confirmed(self) -> bool:
        return self.set_code_as_printed and (self.set_code_confidence or 0.0) >= STRONG_WORD_CONFIDENCE


def _holds_code(text: str, code: str) -> bool:
    """``text`` has ``code`` as a whole capitalised token, or glued to one misread bullet."""
    for token in _TOKEN.findall(text):
        stem = token[:len(code)]
        if stem.lower() != code or stem.upper() != stem:
            continue
        rest = token[len(code):]
        if rest == "" or (len(rest) == 1 and rest in _BULLET_LETTERS):
            return True
    return False


def _number_key(raw: str) -> str:
    return raw.replace(" ", "").translate(DIGIT_LOOKALIKES).lower().lstrip("0") or "0"


def read_collector(evidence: Any) -> CollectorReading:
    """Assess the stored collector read of ``evidence`` (an ImageEvidence row or the same fields)."""
    text = getattr(evidence, "collector_line_raw_text", None) or ""
    code = (getattr(evidence, "collector_set_code", None) or "").strip().lower()
    raw_number = (getattr(evidence, "collector_number", None) or "").strip().lower()
    number = (raw_number.lstrip("0") or "0") if raw_number else None
    as_printed = bool(code) and _holds_code(text, code)
    confidence = None
    if as_printed:
        confs = [float(box.get("conf", -1)) for box in getattr(evidence, "collector_word_boxes", None) or []
                 if isinstance(box, dict) and _holds_code(str(box.get("text", "")), code)]
        confidence = max(confs) if confs else None
    total = None
    repairs: list[RepairedNumber] = []
    collector_form = False
    # The stored rows parsed as Stage C parsed them: its number in a collector form, with its total.
    parse = parse_collector_rows(text.splitlines())
    if number is not None and parse.number == number and parse.form in (FORM_SLASH, FORM_RARITY):
        collector_form, total = True, parse.total
    for m in SLASH_NUMBER.finditer(text):
        read_total = _total(m.group(3))
        if read_total is not None and read_total < MIN_PRINTED_TOTAL:
            continue  # power and toughness ("4/3"), not a number over a set's total
        if number is not None and _number_key(m.group(2)) == number:
            collector_form = True
            total = total if total is not None else read_total
        glued = m.group(1)
        lead = glued[-1] if glued else ""
        if lead and lead.translate(LEADING_DIGIT_LOOKALIKES) != lead:
            repaired = _number_key(lead.translate(LEADING_DIGIT_LOOKALIKES) + m.group(2))
            repairs.append(RepairedNumber(repaired, lead + m.group(2), read_total))
    collector_form = collector_form or (number is not None and any(
        _number_key(m.group(1)) == number for m in RARITY_NUMBER.finditer(text)))
    return CollectorReading(as_printed, confidence, collector_form, total, tuple(repairs))


def _total(raw: str) -> int | None:
    digits = raw.translate(DIGIT_LOOKALIKES)
    return int(digits) if digits.isdigit() else None


def year_is_marked(evidence: Any) -> bool:
    """The stored copyright year follows a copyright mark in the legal text (a bare year may be anything)."""
    year = getattr(evidence, "copyright_year", None)
    text = getattr(evidence, "legal_raw_text", None) or ""
    return year is not None and int(year) in marked_years(text)
