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


# --- Parsing text lines -----------------------------------------------------------------------------
#
# A scene-text reader hands over whole printed lines (boxes on one line already joined), not pixels.
# The parse below finds the collector line's parts in them, by the formats above, and says which form
# gave the number; it never decides alone: the calculators confirm every reading against the catalogue.

# Printed language codes and the catalogue's (Scryfall's) codes for them.
PRINTED_LANGUAGES: dict[str, str] = {
    "EN": "en", "DE": "de", "FR": "fr", "IT": "it", "SP": "es", "ES": "es", "PT": "pt", "JP": "ja", "JA": "ja",
    "RU": "ru", "KO": "ko", "KR": "ko", "CS": "zhs", "CT": "zht", "ZH": "zhs", "PH": "ph",
}
# A number over a total below this is power and toughness ("4/3", "12/12"), not a set's printed size.
MIN_PRINTED_TOTAL = 20
# Bullets, stars and the marks OCR reads for them, between the set code and the language.
_MARKS = r"(?:[^\w]|[\u00f8\u00d8])*"
# (A bullet read as a lower-case e, o or a sits among them: "GFF*eEN"; or as a slashed o: "FDN\u00f8 DE".)
_SEPARATOR = rf"{_MARKS}[eoa]?{_MARKS}"
_LANG_ALT = "|".join(sorted(PRINTED_LANGUAGES, key=len, reverse=True))
# The set code and language as one token: "BFZ • EN", "BFZ·EN", "KHM-EN", "C16 * JP", "SOI·ENVINCENT"
# (the artist glued on: after the language comes anything but a lower-case letter).
SET_AND_LANGUAGE = re.compile(
    rf"(?<![A-Za-z0-9])([A-Z0-9]{{2,5}}){_SEPARATOR}({_LANG_ALT})(?![a-z])"
)
# Number over total, an optional rarity letter after: "171/274 C", "O41/281".
_SLASH = re.compile(r"(?<![0-9A-Za-z/+\-])([0-9OoIlSB]{1,4}[a-z]?)\s*[/|\\]\s*([0-9OoIlSB]{2,4})(?![0-9])")
# A rarity letter then the 2023+ four-digit number: "R 0335", "L 0193".
# (Not the start of a year range: "C 1993-2012" is a legal line.)
_RARITY_FOUR = re.compile(rf"(?<![A-Za-z0-9])[{RARITY_LETTERS}]\s*[^\sA-Za-z0-9]?\s*([0-9OIlSB]{{4}}[a-z]?)(?![0-9])"
                          r"(?!\s*[-\u2013]\s*(?:19|20)\d{2})")
# The slash misread as a comma or a full stop ("101,354 C"): taken only with the rarity letter after.
_SLASH_MISREAD = re.compile(
    rf"(?<![0-9A-Za-z/+\-])([0-9OIlSB]{{1,4}})\s*[,.]\s*([0-9OIlSB]{{3}})\s*[{RARITY_LETTERS}](?![A-Za-z])")
# A lone number and a rarity letter, on a line of its own or before the set token: "311 R".
_LONE_NUMBER = re.compile(rf"(?<![0-9A-Za-z/,.])([0-9]{{1,4}}[a-z]?)\s+[{RARITY_LETTERS}](?![A-Za-z0-9])")
# The same number whose rarity letter, a small glyph apart from it, was not read: a row holding only a
# number of three or four digits ("312"; a planeswalker's loyalty or a power has one or two) and not a
# year, above the set-and-language token with at most the legal line between them.
_BARE_NUMBER = re.compile(r"\s*([0-9]{3,4}[a-z]?)\s*")
# The legal line: a line holding one of these words or marks.
_LEGAL = re.compile(r"wizards|coast|\bllc\b|\binc\b|\u00a9|\(c\)|\u2122|\bTM\b", re.IGNORECASE)
# ("01993": a copyright mark read as a zero.)
_YEAR = re.compile(r"(?<![1-9])(?:19|20)\d{2}(?:\s*[-\u2013]\s*(?:19|20)\d{2})?(?!\d)")
# The number at the very end of a legal line, with no total (the total cut off): "... LLC 91".
_TRAILING_NUMBER = re.compile(r"(?<![0-9/])([0-9]{1,3}[a-z]?)\s*$")
# On the legal line the number may be glued to the word before it ("L1.C230/249" for "LLC 230/249").
_LEGAL_SLASH = re.compile(r"([0-9OIlSB]{1,4}[a-z]?)\s*[/|\\]\s*([0-9OoIlSB]{2,4})(?![0-9])")

FORM_SLASH = "slash"           # number over the set's printed total
FORM_RARITY = "rarity"         # 2023+: rarity letter and four digits
FORM_LONE = "lone"             # a number and a rarity letter beside the set-and-language token
FORM_LEGAL = "legal-line"      # 2003-2014: the number at the end of the legal line


@dataclass(frozen=True)
class LineParse:
    """What the collector end's lines say: the number and how it was printed, the set code and
    language (as the catalogue names them), and the printed total."""

    number: str | None = None
    form: str | None = None
    total: int | None = None
    set_code: str | None = None
    set_code_known: bool = False
    set_code_repaired: bool = False
    language: str | None = None

    @property
    def read_anything(self) -> bool:
        return self.number is not None or self.set_code is not None


# A year after a copyright mark, or starting its line before "Wizards": a scene-text reader often drops
# the small mark ("MA 2000 Wizards" after other words may be a misread mark, and stays unmarked), reads
# it as a letter glued to the year ("Q1996 Wizards") and misreads a letter of "Wizards" ("1995 Wizands").
# A range gives its end: "(c) 1993-2012" is a 2012 card.
_MARKED_YEAR = re.compile(
    r"(?:\u00a9|\(c\)|\bc\)|copyright|&)\s*(?:(?:19|20)\d{2}\s*[-\u2013]\s*)?((?:19|20)\d{2})\b"
    r"|^[^\w]*[QO@]?(?:(?:19|20)\d{2}\s*[-\u2013]\s*)?((?:19|20)\d{2})\s+wi[zs]\w*",
    re.IGNORECASE | re.MULTILINE,
)

# The artist credit's "Illus." as printed and as misread: "Ilus", "lus.", "Itus." (the double l read as
# t), "ILLUS.".
ILLUS_ANCHOR = r"(?:\b[Il1|]{1,2}lu[s5][.,:]?|\b[il1|]u[s5][.,:]|\b[Il1|]tu[s5][.,:]|\bILLU[S5][.,:]?)"
# The credit of 1993-1994 frames, a copyright mark before the artist's name ("Illus. \u00a9Anson Maddocks"):
# those frames print neither a legal line nor a number, and only the first core sets printed it.
EARLY_CREDIT = re.compile(rf"{ILLUS_ANCHOR}\s*(?:\u00a9|\(c\))")
# The last year a printing with the early credit was released (Revised, Summer Magic: 1994; Fourth
# Edition, 1995, prints "Illus." and a legal line).
EARLY_CREDIT_LAST_YEAR = 1994
# The first set whose cards print a collector number (Exodus, 1998): a legal line whose every year is
# earlier belongs to a frame that prints none.
FIRST_NUMBERED_YEAR = 1998


def marked_years(text: str) -> list[int]:
    """The years the legal text marks as copyright years, in reading order (Stage C stores the first;
    Stage D trusts a stored year only when one of these is it)."""
    return [int(m.group(1) or m.group(2)) for m in _MARKED_YEAR.finditer(text)]


def normalize_collector_number(number: str | None) -> str:
    """A catalogue's collector number as both stages compare it: lower-case with leading zeros dropped
    (``"041"`` -> ``"41"``, ``"★007"`` -> ``"★7"``); blank for None."""
    if not number:
        return ""
    text = number.strip().lower()
    return re.sub(r"^([★*]?)0+(?=\d)", r"\1", text)


def number_key(raw: str) -> str:
    """A printed number as the catalogue compares it: look-alike letters as digits, no leading zeros."""
    digits = raw.replace(" ", "").translate(DIGIT_LOOKALIKES).lower()
    return digits.lstrip("0") or "0"


def _total(raw: str) -> int | None:
    digits = raw.translate(DIGIT_LOOKALIKES)
    return int(digits) if digits.isdigit() else None


def _set_and_language(rows: list[str], set_codes: frozenset[str] | None) -> tuple[int, str, bool, bool, str] | None:
    """(row index, set code, known, repaired, language) of the first set-and-language token whose code
    the catalogue knows as printed; failing that, one that exactly one look-alike repair makes known;
    failing that, the first token seen (unknown)."""
    found: list[tuple[int, str, str]] = []
    for i, row in enumerate(rows):
        for match in SET_AND_LANGUAGE.finditer(row):
            code, lang = match.group(1), match.group(2)
            if code in PRINTED_LANGUAGES or code in ("TM", "LLC", "INC"):
                continue
            found.append((i, code.lower(), PRINTED_LANGUAGES[lang]))
    if not found:
        return None
    if set_codes is None:
        i, code, lang = found[0]
        return i, code, False, False, lang
    for i, code, lang in found:
        if code in set_codes:
            return i, code, True, False, lang
    for i, code, lang in found:
        # The bullet read as a capital glued to the code ("BFZBEN"): the code as printed is known.
        if len(code) >= 3 and code[:-1] in set_codes:
            return i, code[:-1], True, False, lang
    for i, code, lang in found:
        repaired = repair_code(code, set_codes)
        if repaired is not None:
            return i, repaired, True, True, lang
    i, code, lang = found[0]
    return i, code, False, False, lang


# Glyphs a set code's letters and digits are misread as, each way.
_CODE_CONFUSIONS = {"0": "o", "o": "0q", "1": "il", "i": "1l", "l": "1i", "5": "s", "s": "5", "8": "b", "b": "8",
                    "2": "z", "z": "2", "6": "g", "g": "6", "u": "v", "v": "u", "e": "f", "f": "e"}


def repair_code(code: str, set_codes: frozenset[str]) -> str | None:
    """The one known set code ``code`` becomes by swapping a single look-alike glyph; None when none
    or several do (a repair that could go two ways is no reading)."""
    fits = {code[:i] + alt + code[i + 1:] for i, ch in enumerate(code) for alt in _CODE_CONFUSIONS.get(ch, "")}
    known = fits & set_codes
    return next(iter(known)) if len(known) == 1 else None


def parse_collector_rows(rows: list[str], set_codes: frozenset[str] | None = None) -> LineParse:
    """The collector line's parts from the rows of the card's collector end (each row one printed
    line, boxes joined left to right). Forms, in the order tried: number over total (a total below
    ``MIN_PRINTED_TOTAL`` is power and toughness), rarity letter and four digits, a number and a rarity
    letter beside the set-and-language token, and the number at the end of the legal line."""
    token = _set_and_language(rows, set_codes)
    set_code = language = None
    known = repaired = False
    token_row = None
    if token is not None:
        token_row, set_code, known, repaired, language = token
    number = form = None
    total: int | None = None
    for row in rows:
        for match in (*_SLASH.finditer(row), *_SLASH_MISREAD.finditer(row)):
            read_total = _total(match.group(2))
            if read_total is not None and read_total >= MIN_PRINTED_TOTAL:
                number, form, total = number_key(match.group(1)), FORM_SLASH, read_total
                break
        if number is not None:
            break
    if number is None:
        for row in rows:
            for match in _RARITY_FOUR.finditer(row):
                # "M & 1993-2010 Wizards": a year on the legal line is no four-digit number.
                if _LEGAL.search(row) and _YEAR.fullmatch(match.group(1)) is not None:
                    continue
                number, form = number_key(match.group(1)), FORM_RARITY
                break
            if number is not None:
                break
    if number is None and token_row is not None:
        nearby = [rows[i] for i in (token_row - 1, token_row) if 0 <= i < len(rows)]
        for row in nearby:
            match = _LONE_NUMBER.search(row)
            if match is not None:
                number, form = number_key(match.group(1)), FORM_LONE
                break
        else:
            bare = _bare_number_above(rows, token_row)
            if bare is not None:
                number, form = number_key(bare), FORM_LONE
    if number is None:
        for row in rows:
            year = _YEAR.search(row)
            # A range of years ("1993-2009") is printed nowhere else, so it marks the line too.
            if year is None or not (_LEGAL.search(row) or "-" in year.group(0) or "\u2013" in year.group(0)):
                continue
            rest = row[year.end():]
            glued = next((m for m in _LEGAL_SLASH.finditer(rest)
                          if (_total(m.group(2)) or 0) >= MIN_PRINTED_TOTAL), None)
            if glued is not None:
                number, form, total = number_key(glued.group(1)), FORM_SLASH, _total(glued.group(2))
                break
            match = _TRAILING_NUMBER.search(rest)
            if match is not None:
                number, form = number_key(match.group(1)), FORM_LEGAL
                break
    return LineParse(number, form, total, set_code, known, repaired, language)


def _bare_number_above(rows: list[str], token_row: int) -> str | None:
    """A row of only a three- or four-digit number just above the set token row, or above the legal line
    that lies just above it (the legal line on the right can sit a little higher than the token)."""
    above = token_row - 1
    if above >= 0 and _LEGAL.search(rows[above]):
        above -= 1
    match = _BARE_NUMBER.fullmatch(rows[above]) if above >= 0 else None
    if match is None or _YEAR.fullmatch(match.group(1)):  # a year split from its legal line is no number
        return None
    return match.group(1)


_WIZARDS = re.compile(r"wizards", re.IGNORECASE)


def shows_several_cards(rows: list[str], set_codes: frozenset[str] | None) -> bool:
    """Whether the collector end's rows hold the bottom lines of more than one card: two set-and-
    language tokens of known sets ("KARL KO" is an artist, not a set), or two legal lines
    ("Wizards of the Coast"), where one card prints one."""
    tokens = sum(1 for row in rows for m in SET_AND_LANGUAGE.finditer(row)
                 if set_codes is not None and m.group(1).lower() in set_codes)
    legal = sum(len(_WIZARDS.findall(row)) for row in rows)
    return tokens >= 2 or legal >= 2
