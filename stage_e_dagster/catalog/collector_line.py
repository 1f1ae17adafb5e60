"""The collector line's layouts and alphabet, as data both stages read.

Real cards print their collector line in one of four layouts (:data:`COLLECTOR_FORMATS`); the
number takes one of two printed forms (:data:`NUMBER_FORMS`). The Stage C parser tries the forms
in this order and Stage D looks back at the stored text for the same forms, so what one stage
read and what the other checks agree. OCR of that small type confuses a handful of letters with
digits; which ones, and which rarity letters and language codes exist, is stated once here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LANG_CODES = ("EN", "DE", "FR", "IT", "ES", "PT", "JA", "JP", "RU", "KO", "ZH", "CS", "CT", "PH")
RARITY_LETTERS = "CURMSLTPB"
# Letters OCR reads for digits inside a number: O/o for 0, I/l for 1, S for 5, B for 8.
DIGIT_LOOKALIKES = str.maketrans({"O": "0", "o": "0", "I": "1", "l": "1", "S": "5", "B": "8"})
# Letters OCR reads for a number's first digit ("t74/274" is 174/274). A number repaired through
# these is only a guess until the catalogue has that number for the card's name.
LEADING_DIGIT_LOOKALIKES = str.maketrans({"t": "1", "i": "1", "I": "1", "l": "1", "|": "1", "T": "7",
                                          "O": "0", "o": "0", "D": "0", "S": "5", "s": "5", "B": "8",
                                          "Z": "2", "z": "2", "G": "6", "g": "9", "q": "9"})
# Letters OCR glues onto the front of a number ("t74/274", "LLC68/244"): never digit look-alikes
# inside a number.
_GLUED_LETTERS = "AC-HJ-NP-RT-Za-km-np-z"

# Number over set size, e.g. "041/281"; OCR may split a digit group or read O/I/l/S/B for digits.
# Group 1: the number, group 2: the printed total, group 3: the letters glued before the number.
SLASH_NUMBER = re.compile(
    rf"(?<![0-9A-Za-z])([{_GLUED_LETTERS}]{{1,4}}(?=[0-9]))?[*\u2605]?"
    r"((?:[0-9OoIlSB] ?){0,3}[0-9OoIlSB][a-z]?)\s*[/|\\]\s*([0-9OoIlSB]{1,4})"
)
# A rarity letter then the (2023+) four-digit number, e.g. "C 0100"; a stray mark may sit between.
RARITY_NUMBER = re.compile(rf"(?<![0-9A-Za-z])[{RARITY_LETTERS}]\s*[^\sA-Za-z0-9]?\s*([0-9OoIlSB]{{3,5}}[a-z]?)\b")


@dataclass(frozen=True)
class NumberForm:
    """One printed form of the collector number, with the group of ``pattern`` that holds it."""

    name: str
    pattern: re.Pattern[str]
    number_group: int
    total_group: int | None    # the group holding the printed set size, when the form prints one
    digits: int | None = None  # the form always prints this many digits (a shorter read was clipped)


NUMBER_SLASH = "slash"    # number over set size: "041/281"
NUMBER_RARITY = "rarity"  # rarity letter then a 4-digit number: "C 0100"
NUMBER_FORMS: tuple[NumberForm, ...] = (
    NumberForm(NUMBER_SLASH, SLASH_NUMBER, number_group=2, total_group=3),
    NumberForm(NUMBER_RARITY, RARITY_NUMBER, number_group=1, total_group=None, digits=4),
)
FORMS_BY_NAME = {form.name: form for form in NUMBER_FORMS}


@dataclass(frozen=True)
class CollectorFormat:
    """One layout of the printed collector line."""

    name: str
    frames: frozenset[str]          # Scryfall's ``frame`` values of the cards that print it
    number_forms: tuple[str, ...]   # NUMBER_FORMS names, in the order a parse tries them
    prints_set_code: bool           # a ``SET • LANG`` token beside the number
    number_place: str | None        # "collector block" (bottom left) or "copyright line" (end of it)
    example: str


COLLECTOR_FORMATS: tuple[CollectorFormat, ...] = (
    CollectorFormat("2023+", frozenset({"2015", "future"}), (NUMBER_RARITY,), True, "collector block",
                    "C 0100 FDN \u2022 DE"),
    CollectorFormat("2015-2022", frozenset({"2015", "future"}), (NUMBER_SLASH,), True, "collector block",
                    "041/281 C / DMU \u2022 EN \u2022 artist"),
    CollectorFormat("pre-2015", frozenset({"2003"}), (NUMBER_SLASH,), False, "copyright line",
                    "\u2122 & \u00a9 1993-2012 Wizards of the Coast LLC 68/244"),
    CollectorFormat("none", frozenset({"1993", "1997"}), (), False, None, "Illus. Anson Maddocks"),
)


def formats_for_frame(frame: str | None) -> tuple[CollectorFormat, ...]:
    """The layouts a card of Scryfall frame ``frame`` may print (every layout when the frame is unknown)."""
    found = tuple(f for f in COLLECTOR_FORMATS if frame in f.frames)
    return found or COLLECTOR_FORMATS


def prints_number(frame: str | None) -> bool:
    """Whether a card of this frame prints a collector number at all (unknown frames may)."""
    return any(f.number_forms for f in formats_for_frame(frame))
