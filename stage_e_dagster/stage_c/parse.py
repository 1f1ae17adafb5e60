"""Tolerant parses of the printed bottom lines: collector number, set code, language, artist, legal line.

OCR of small type misreads bullets and confuses look-alike glyphs, so the set code is checked
against the catalogue's lexicon and repaired only when exactly one repair is a known code. Each
parse says how it got its number and its set code, so a caller can tell a clean read from a
repaired or weak one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from ..catalog.collector_line import (  # noqa: F401  (re-exported: the names' old home)
    DIGIT_LOOKALIKES,
    LANG_CODES,
    NUMBER_FORMS,
    NUMBER_RARITY,
    NUMBER_SLASH,
    RARITY_LETTERS,
    RARITY_NUMBER,
    SLASH_NUMBER,
)

# How a parse got its collector number and its set code.
NUMBER_BARE = "bare"            # a lone number on a line: weak, junk from the frame edge reads like this
SET_CODE_DIRECT = "direct"      # the token as printed (a misread bullet peeled off) is the code
SET_CODE_REPAIRED = "repaired"  # the code is known only after swapping look-alike glyphs

_BARE_NUMBER = re.compile(r"(?<![0-9A-Za-z/])[*\u2605]?([0-9]{1,4}[a-z]?)(?![0-9/])")
# A language code is a whole token ("FRF" and "DEN" are set codes), or glued to a bullet misread as e/o/a.
_LANG = re.compile(
    rf"(?:(?<![A-Za-z0-9])|(?<=(?<![A-Za-z0-9])[eoa]))({'|'.join(LANG_CODES)})(?![A-Za-z0-9])"
)
# A marked year, or the end of a marked range: "(c) 1993-2012" is a 2012 card.
# A scene-text reader often drops the small (c) mark: a year followed by "Wizards" is marked as well.
_YEAR_MARKED = re.compile(
    r"(?:\u00a9|\(c\)|\bc\)|copyright|&)\s*((?:19|20)\d{2})(?:\s*[-\u2013]\s*((?:19|20)\d{2}))?\b"
    r"|((?:19|20)\d{2})(?:\s*[-\u2013]\s*((?:19|20)\d{2}))?\s+wizards",
    re.IGNORECASE,
)
_YEAR_BARE = re.compile(r"(?<!\d)((?:19|20)\d{2})(?:\s*[-\u2013]\s*((?:19|20)\d{2}))?(?!\d)")
_PROXY = re.compile(r"not\s*for\s*sale|\bproxy\b|playtest|original\s+design", re.IGNORECASE)
# Name words are capitalised ("Anna Adler") or, on newer frames, all capitals ("JOHN AVON"); one style per
# name, and the words of the legal and proxy text never count as a name.
_NAME_WORD = r"[A-Z][a-z][\w'\-]*"
_CAPS_WORD = r"[A-Z][A-Z'\-]+"
_NOT_NAME_WORDS = frozenset({"PROXY", "NOT", "FOR", "SALE", "TM", "LLC", "INC", "WIZARDS", "OF", "THE", "COAST",
                             "ALL", "RIGHTS", "RESERVED", "PLAYTEST", "ILLUS", *LANG_CODES})
# "Illus." as printed and as misread: "Ilus", "lus.", "Itus." (the double l read as t), "ILLUS.".
_ILLUS_ANCHOR = r"(?:\b[Il1|]{1,2}lu[s5][.,:]?|\b[il1|]u[s5][.,:]|\b[Il1|]tu[s5][.,:]|\bILLU[S5][.,:]?)"
_ILLUS = re.compile(rf"{_ILLUS_ANCHOR}\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,3}})")
_ILLUS_CAPS = re.compile(rf"{_ILLUS_ANCHOR}\s+({_CAPS_WORD}(?:!?\s+{_CAPS_WORD}){{0,3}}!?)")
_GLUED = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")

# Glyphs OCR confuses, digit side first.
_CONFUSIONS = {"0": "od", "o": "0dq", "d": "o", "q": "o", "1": "il", "i": "1l", "l": "1i", "5": "s",
               "s": "5", "8": "b", "b": "8e", "2": "z", "z": "2", "6": "g", "g": "6c", "c": "g", "e": "fb",
               "f": "e", "u": "v", "v": "u", "p": "r", "r": "p"}
_BULLET_MISREADS = set("eo*«»·.,:;-+°™'\"")


@dataclass(frozen=True)
class CollectorParse:
    collector_number: str | None
    set_code: str | None
    language: str | None
    set_code_known: bool
    # False when the number's printed form looks clipped (the newer style always prints 4 digits).
    number_complete: bool = True
    number_source: str | None = None     # NUMBER_SLASH, NUMBER_RARITY or NUMBER_BARE
    set_code_source: str | None = None   # SET_CODE_DIRECT or SET_CODE_REPAIRED

    @property
    def number_is_weak(self) -> bool:
        """A bare number is what a junk line from the frame edge looks like; it needs more support."""
        return self.number_source == NUMBER_BARE


def normalize_number(number: str | None) -> str | None:
    """Collector numbers compare without leading zeros and case: ``0041`` equals ``41``."""
    if number is None:
        return None
    stripped = number.strip().lower().lstrip("0")
    return stripped or "0"


def repair_set_code(raw: str, lexicon: frozenset[str] | None) -> tuple[str, bool]:
    """The set code and whether the lexicon knows it, repairing look-alike glyphs or a glued bullet."""
    code, known, _ = resolve_set_code(raw, lexicon)
    return code, known


def resolve_set_code(raw: str, lexicon: frozenset[str] | None) -> tuple[str, bool, str]:
    """Like :func:`repair_set_code`, plus how the code was obtained (SET_CODE_DIRECT or SET_CODE_REPAIRED)."""
    code = raw.lower()
    if lexicon is None or code in lexicon:
        return code, lexicon is not None, SET_CODE_DIRECT
    peeled = code[:-1] if len(code) >= 4 and code[-1] in "eo" else None
    candidates = {peeled} if peeled else set()
    options = [(ch, *_CONFUSIONS.get(ch, "")) for ch in code]
    if len(code) <= 5:
        candidates.update("".join(combo) for combo in product(*options))
    known = sorted(c for c in candidates if c in lexicon)
    if len(known) == 1:
        # Peeling a glued bullet keeps the printed letters; any other fix swapped a glyph.
        return known[0], True, SET_CODE_DIRECT if known[0] == peeled else SET_CODE_REPAIRED
    return code, False, SET_CODE_DIRECT


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


def _glued_code_and_language(line: str, lexicon: frozenset[str]) -> tuple[str, str] | None:
    """``SET • LANG`` read as one token, the bullet misread as a letter ("BFZBEN", "DMUREN"): the set
    code (as printed, known to the lexicon) and the language, from the line's first token."""
    first = re.match(r"\s*([A-Za-z0-9]+)", line)
    token = first.group(1) if first else ""
    for lang in LANG_CODES:
        code = token[:-len(lang) - 1]
        if token.endswith(lang) and 2 <= len(code) <= 5 and code.upper() == code and code.lower() in lexicon:
            return code.lower(), lang.lower()
    return None


def parse_collector_lines(text: str, lexicon: frozenset[str] | None) -> CollectorParse:
    """Collector number, set code and language from the collector block's text (any line order)."""
    number = number_source = None
    complete = True
    match = None
    for form in NUMBER_FORMS:  # the printed forms, in the order the layouts table gives
        match = form.pattern.search(text)
        if match is None:
            continue
        printed = match.group(form.number_group)
        number = printed.replace(" ", "").translate(DIGIT_LOOKALIKES)
        number_source = form.name
        complete = form.digits is None or len(printed.rstrip("abcdefghijklmnopqrstuvwxyz")) == form.digits
        break
    if match is None:
        for line in text.splitlines():
            if _LANG.search(line) or _YEAR_MARKED.search(line):
                continue
            bare = _BARE_NUMBER.search(line)
            if bare:
                number, number_source = bare.group(1), NUMBER_BARE
                break
    set_code = language = source = None
    known = False
    for line in text.splitlines():
        lang = _LANG.search(line)
        if not lang:
            continue
        raw = _set_code_before(line, lang.start())
        if raw is None or raw.upper() in LANG_CODES:
            continue
        set_code, known, source = resolve_set_code(raw, lexicon)
        language = lang.group(1).lower()
        break
    if (set_code is None or not known) and lexicon is not None:
        # The language marker was misread: accept the first token of a line when it is a known code as
        # printed. No look-alike repair here: off the marker's position, junk from the frame edge
        # repairs into real codes too easily.
        for line in text.splitlines():
            first = re.match(r"\s*([A-Za-z0-9]{2,6})", line)
            if first is None or (match and match.group(0) in line):
                continue
            raw = _code_token(first.group(1))
            if raw is not None and raw.lower() in lexicon:
                set_code, known, source = raw.lower(), True, SET_CODE_DIRECT
                break
            glued = _glued_code_and_language(line, lexicon)
            if glued is not None:
                (set_code, language), known, source = glued, True, SET_CODE_DIRECT
                break
    return CollectorParse(normalize_number(number) if number else None, set_code, language, known, complete,
                          number_source=number_source if number else None,
                          set_code_source=source if set_code else None)


# Words of the copyright line: a line holding one is the legal line even when its mark is misread.
LEGAL_WORDS = re.compile(r"wizards|coast|\bllc\b|\u00a9|\(c\)", re.IGNORECASE)


def copyright_line_number(text: str) -> str | None:
    """The number printed at the end of the copyright line (2008-2014 frames: "... Coast LLC 68/244").

    These frames centre the line, so the number sits right of the collector block: give this the
    whole band's text, not only its left part. The number is looked for after the line's year (or
    after its start when OCR lost the copyright mark).
    """
    for line in text.splitlines():
        marked = _YEAR_MARKED.search(line)
        if marked is None and not LEGAL_WORDS.search(line):
            continue
        year = marked or _YEAR_BARE.search(line)
        slash = SLASH_NUMBER.search(line, year.end() if year else 0)
        if slash:
            return normalize_number(slash.group(2).replace(" ", "").translate(DIGIT_LOOKALIKES))
    return None


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
    """Modern frames print the artist after ``SET • LANG`` and a brush mark, in capitals since 2015."""
    lang = _LANG.search(line)
    if not lang:
        return None
    rest = line[lang.end():]
    caps = re.search(rf"{_CAPS_WORD}(?:!?\s+{_CAPS_WORD})*!?", rest)
    name = _caps_name(caps.group(0)) if caps else None
    if name:
        return name
    words = re.findall(_NAME_WORD, rest)
    name = " ".join(words[:3]).strip()
    return _unglue(name)[:64] or None


def parse_legal(text: str) -> tuple[int | None, bool]:
    """Copyright year (marked by ©, (c), & or 'copyright', else a bare year; a range gives its end) and
    the proxy marker."""
    marked = _YEAR_MARKED.search(text)
    year = (marked.group(2) or marked.group(1) or marked.group(4) or marked.group(3)) if marked else None
    if year is None:
        bare = _YEAR_BARE.search(text)
        year = (bare.group(2) or bare.group(1)) if bare else None
    return (int(year) if year else None), bool(_PROXY.search(text))
