"""Tolerant parses of the printed bottom lines: collector number, set code, language, artist, legal line.

OCR of small type misreads bullets and confuses look-alike glyphs, so the set code is checked
against the catalogue's lexicon and repaired only when exactly one repair is a known code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

LANG_CODES = ("EN", "DE", "FR", "IT", "ES", "PT", "JA", "JP", "RU", "KO", "ZH", "CS", "CT", "PH")
RARITY_LETTERS = "CURMSLTPB"

# Number over set size, e.g. "041/281"; OCR may split a digit group or read O/I/l/S/B for digits.
_SLASH = re.compile(
    r"(?<![0-9A-Za-z])[*\u2605]?((?:[0-9OoIlSB] ?){0,3}[0-9OoIlSB][a-z]?)\s*[/|\\]\s*([0-9OoIlSB]{1,4})"
)
_RARITY_FIRST = re.compile(rf"(?<![0-9A-Za-z])[{RARITY_LETTERS}]\s*[^\sA-Za-z0-9]?\s*([0-9OoIlSB]{{3,5}}[a-z]?)\b")
_BARE_NUMBER = re.compile(r"(?<![0-9A-Za-z/])[*\u2605]?([0-9]{1,4}[a-z]?)(?![0-9/])")
_LANG = re.compile(rf"(?<![A-Z])({'|'.join(LANG_CODES)})(?![a-z])")
_YEAR_MARKED = re.compile(r"(?:\u00a9|\(c\)|\bc\)|copyright|&)\s*((?:19|20)\d{2})\b", re.IGNORECASE)
_YEAR_BARE = re.compile(r"(?<!\d)((?:19|20)\d{2})(?!\d)")
_PROXY = re.compile(r"not\s*for\s*sale|\bproxy\b|playtest|original\s+design", re.IGNORECASE)
# Name words are capitalised, not all capitals, so a "PROXY" or "NOT FOR SALE" beside the credit stays out.
_NAME_WORD = r"[A-Z][a-z][\w'\-]*"
_ILLUS = re.compile(rf"(?:\b[Il1|]{{1,2}}lu[s5][.,:]?|\b[il1|]u[s5][.,:])\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,3}})")
_GLUED = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")

# Glyphs OCR confuses, digit side first.
_CONFUSIONS = {"0": "od", "o": "0dq", "d": "o", "q": "o", "1": "il", "i": "1l", "l": "1i", "5": "s",
               "s": "5", "8": "b", "b": "8e", "2": "z", "z": "2", "6": "g", "g": "6c", "c": "g", "e": "fb",
               "f": "e", "u": "v", "v": "u", "p": "r", "r": "p"}
_DIGIT_FIX = str.maketrans({"O": "0", "o": "0", "I": "1", "l": "1", "S": "5", "B": "8"})
_BULLET_MISREADS = set("eo*«»·.,:;-+°™'\"")


@dataclass(frozen=True)
class CollectorParse:
    collector_number: str | None
    set_code: str | None
    language: str | None
    set_code_known: bool
    # False when the number's printed form looks clipped (the newer style always prints 4 digits).
    number_complete: bool = True


def normalize_number(number: str | None) -> str | None:
    """Collector numbers compare without leading zeros and case: ``0041`` equals ``41``."""
    if number is None:
        return None
    stripped = number.strip().lower().lstrip("0")
    return stripped or "0"


def repair_set_code(raw: str, lexicon: frozenset[str] | None) -> tuple[str, bool]:
    """The set code and whether the lexicon knows it, repairing look-alike glyphs or a glued bullet."""
    code = raw.lower()
    if lexicon is None or code in lexicon:
        return code, lexicon is not None
    candidates = {code[:-1]} if len(code) >= 4 and code[-1] in "eo" else set()
    options = [(ch, *_CONFUSIONS.get(ch, "")) for ch in code]
    if len(code) <= 5:
        candidates.update("".join(combo) for combo in product(*options))
    known = sorted(c for c in candidates if c in lexicon)
    if len(known) == 1:
        return known[0], True
    return code, False


def _code_token(head: str) -> str | None:
    """The last 2-5 character token of ``head``, with a misread bullet peeled off its end."""
    tokens = re.findall(r"[A-Za-z0-9]+", head)
    while tokens and len(tokens[-1]) == 1 and tokens[-1] in "eoa":
        tokens.pop()
    if not tokens:
        return None
    token = tokens[-1]
    if len(token) in (4, 5, 6) and token[-1] in "eoa" and token[:-1].upper() == token[:-1]:
        token = token[:-1]
    return token if 2 <= len(token) <= 5 else None


def _set_code_before(text: str, lang_start: int) -> str | None:
    """The set code token just before the language marker."""
    return _code_token(text[:lang_start])


def parse_collector_lines(text: str, lexicon: frozenset[str] | None) -> CollectorParse:
    """Collector number, set code and language from the collector block's text (any line order)."""
    number = None
    complete = True
    match = _SLASH.search(text)
    if match is None:
        match = _RARITY_FIRST.search(text)
        complete = match is None or len(match.group(1).rstrip("abcdefghijklmnopqrstuvwxyz")) == 4
    if match:
        number = match.group(1).replace(" ", "").translate(_DIGIT_FIX)
    else:
        for line in text.splitlines():
            if _LANG.search(line) or _YEAR_MARKED.search(line):
                continue
            bare = _BARE_NUMBER.search(line)
            if bare:
                number = bare.group(1)
                break
    set_code = language = None
    known = False
    for line in text.splitlines():
        lang = _LANG.search(line)
        if not lang:
            continue
        raw = _set_code_before(line, lang.start())
        if raw is None or raw.upper() in LANG_CODES:
            continue
        set_code, known = repair_set_code(raw, lexicon)
        language = lang.group(1).lower()
        break
    if (set_code is None or not known) and lexicon is not None:
        # The language marker was misread: accept the first token of a line that is a known code.
        for line in text.splitlines():
            first = re.match(r"\s*([A-Za-z0-9]{2,6})", line)
            if first is None or (match and match.group(0) in line):
                continue
            raw = _code_token(first.group(1))
            if raw is None:
                continue
            fallback, fallback_known = repair_set_code(raw, lexicon)
            if fallback_known:
                set_code, known = fallback, True
                break
    return CollectorParse(normalize_number(number) if number else None, set_code, language, known, complete)


def parse_artist(text: str) -> tuple[str | None, bool]:
    """The ``Illus.`` credit when present (name, True); otherwise (None, False)."""
    match = _ILLUS.search(text)
    if match:
        return _unglue(match.group(1).strip())[:64], True
    return None, False


def _unglue(name: str) -> str:
    """Small type often loses the space between given name and surname: ``SvenGrant``."""
    return " ".join(_GLUED.sub(" ", word) if " " not in name else word for word in name.split())


def parse_artist_after_language(line: str) -> str | None:
    """Modern frames print the artist after ``SET • LANG`` and a brush mark."""
    lang = _LANG.search(line)
    if not lang:
        return None
    words = re.findall(_NAME_WORD, line[lang.end():])
    name = " ".join(words[:3]).strip()
    return _unglue(name)[:64] or None


def parse_legal(text: str) -> tuple[int | None, bool]:
    """Copyright year (marked by ©, (c), & or 'copyright', else a bare year) and the proxy marker."""
    marked = _YEAR_MARKED.search(text)
    year = marked.group(1) if marked else None
    if year is None:
        bare = _YEAR_BARE.search(text)
        year = bare.group(1) if bare else None
    return (int(year) if year else None), bool(_PROXY.search(text))
