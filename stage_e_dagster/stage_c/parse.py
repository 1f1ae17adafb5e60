"""Tolerant parses of the printed bottom lines' other parts: the artist credit and the legal line.

The collector line itself (number, set code, language) is parsed by ``catalog/collector_line.py``,
the one place that knows its formats; this module reads the credit ("Illus. Anson Maddocks", or the
capitals after ``SET • LANG`` on newer frames), the copyright year and the proxy marker from the
same rows.
"""

from __future__ import annotations

import re

from ..catalog.collector_line import (
    EARLY_CREDIT,
    FIRST_NUMBERED_YEAR,
    ILLUS_ANCHOR,
    LANG_CODES,
    SET_AND_LANGUAGE,
    marked_years,
)

_YEAR_BARE = re.compile(r"(?<!\d)((?:19|20)\d{2})(?:\s*[-\u2013]\s*((?:19|20)\d{2}))?(?!\d)")
_PROXY = re.compile(r"not\s*for\s*sale|\bproxy\b|playtest|original\s+design", re.IGNORECASE)
# Name words are capitalised ("Anna Adler") or, on newer frames, all capitals ("JOHN AVON"); one style per
# name, and the words of the legal and proxy text never count as a name.
_NAME_WORD = r"[A-Z][a-z][\w'\-]*"
_CAPS_WORD = r"[A-Z][A-Z'\-]+"
_NOT_NAME_WORDS = frozenset({"PROXY", "NOT", "FOR", "SALE", "TM", "LLC", "INC", "WIZARDS", "OF", "THE", "COAST",
                             "ALL", "RIGHTS", "RESERVED", "PLAYTEST", "ILLUS", *LANG_CODES})
# The credit's name; early printings put a copyright mark before it: "Illus. (c)Anson Maddocks".
_ILLUS = re.compile(rf"{ILLUS_ANCHOR}\s+(?:\u00a9\s*)?({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,3}})")
_ILLUS_CAPS = re.compile(rf"{ILLUS_ANCHOR}\s+(?:\u00a9\s*)?({_CAPS_WORD}(?:!?\s+{_CAPS_WORD}){{0,3}}!?)")
_GLUED = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")


# Words of the copyright line: a line holding one is the legal line even when its mark is misread.
LEGAL_WORDS = re.compile(r"wizards|coast|\bllc\b|\u00a9|\(c\)", re.IGNORECASE)


def parse_artist(text: str) -> tuple[str | None, bool]:
    """The ``Illus.`` credit when present (name, True); otherwise (None, False)."""
    match = _ILLUS.search(text)
    if match:
        return _unglue(match.group(1).strip())[:64], True
    caps = _ILLUS_CAPS.search(text)
    name = _caps_name(caps.group(1)) if caps else None
    if name:
        return name, True
    return None, False


def _caps_name(words_text: str) -> str | None:
    """An all-capitals credit as a name: "JOHN AVON" -> "John Avon", stopping at legal or proxy words
    and at a short mark after the first word (a brush or a stray glyph)."""
    words: list[str] = []
    # "!" glued to a capital is a misread I ("ALEKS!" is "ALEKSI").
    for word in re.findall(r"[A-Z][A-Z'\-]*", re.sub(r"(?<=[A-Z])!", "I", words_text)):
        if word in _NOT_NAME_WORDS or (words and len(word) <= 2) or len(words) == 3:
            break
        if len(word) >= 2:
            words.append(word)
    if not words or len(words[0]) < 3:
        return None
    return " ".join(w.capitalize() for w in words)[:64]


def _unglue(name: str) -> str:
    """Small type often loses the space between given name and surname: ``SvenGrant``."""
    return " ".join(_GLUED.sub(" ", word) if " " not in name else word for word in name.split())


def parse_artist_after_language(line: str) -> str | None:
    """Modern frames print the artist after ``SET • LANG`` and a brush mark, in capitals since 2015
    (glued to the language when the reader lost the space: "SOI·ENVINCENT PROCE")."""
    token = SET_AND_LANGUAGE.search(line)
    if not token:
        return None
    rest = line[token.end():]
    caps = re.search(rf"{_CAPS_WORD}(?:!?\s+{_CAPS_WORD})*!?", rest)
    name = _caps_name(caps.group(0)) if caps else None
    if name:
        return name
    words = []
    for word in re.findall(_NAME_WORD, rest):
        if word.upper() in _NOT_NAME_WORDS or len(words) == 3:
            break  # the legal line follows the credit on one printed line: "Dara Moreau (c) 2016 Wizards"
        words.append(word)
    name = " ".join(words).strip()
    return _unglue(name)[:64] or None


def parse_legal(text: str) -> tuple[int | None, bool]:
    """Copyright year (marked by ©, (c), & or 'copyright', else a bare year; a range gives its end) and
    the proxy marker."""
    marked = marked_years(text)
    if marked:
        return marked[0], bool(_PROXY.search(text))
    bare = _YEAR_BARE.search(text)
    year = (bare.group(2) or bare.group(1)) if bare else None
    return (int(year) if year else None), bool(_PROXY.search(text))


_ANY_YEAR = re.compile(r"(?<!\d)(?:19|20)\d{2}(?!\d)")


def prints_no_number(rows: list[str]) -> bool:
    """Whether the collector end's rows show a frame from before collector numbers were printed: a row
    with the legal line's words whose years all precede ``FIRST_NUMBERED_YEAR``, or the early credit."""
    if any(EARLY_CREDIT.search(row) for row in rows):
        return True
    years = [int(y) for row in rows if LEGAL_WORDS.search(row) for y in _ANY_YEAR.findall(row)]
    return bool(years) and max(years) < FIRST_NUMBERED_YEAR
