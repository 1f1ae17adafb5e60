"""The candidate name index: any name a card is known by -> the printings of that card.

Stage D only ever compares a card with printings of its own name (collector numbers alone are
ambiguous across sets). A card is known by its English name, its faces' names and the names
printed on its non-English printings (``Blitzschlag`` is Lightning Bolt), and each of these finds
every printing of the card: a set that holds the card in any language must never look like a set
without it. The index is built with one query and cached per process and database; a cheap stamp
(row counts and highest ids of printings and expansions) tells when to rebuild, so a micro-batch
pays one small query instead of a rebuild.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.collector_line import normalize_collector_number
from ..catalog.models import Expansion, Printing
from ..catalog.stamp import catalogue_stamp
from .names import collapse, face_names, normalize_name, strip_upload_noise


@dataclass(frozen=True)
class CandidatePrinting:
    id: int
    set_code: str
    number_key: str
    lang: str


@dataclass(frozen=True)
class CandidateMatch:
    """Which lookup tier matched: ``direct``, ``noise-stripped``, ``de-concatenated`` or ``none``.

    ``printed_langs`` is set when the name is only ever printed, never the English name: the
    languages of the printings that carry it (``{"de"}`` for ``Blitzschlag``).
    """

    candidates: tuple[CandidatePrinting, ...]
    tier: str
    printed_langs: frozenset[str] = frozenset()


@dataclass
class NameIndex:
    stamp: tuple[int, ...]
    by_name: dict[str, tuple[CandidatePrinting, ...]]
    by_collapsed: dict[str, frozenset[str]]
    lexicon: frozenset[str]
    printed_langs: dict[str, frozenset[str]] = field(default_factory=dict)
    _memo: dict[str, CandidateMatch] = field(default_factory=dict, repr=False)

    def candidates_for(self, name: str) -> CandidateMatch:
        """Printings for an upload's name: direct, then without upload noise, then spaces restored."""
        found = self._memo.get(name)
        if found is None:
            found = self._lookup(name)
            if len(self._memo) < 200_000:
                self._memo[name] = found
        return found

    def _lookup(self, name: str) -> CandidateMatch:
        key = normalize_name(name)
        if key in self.by_name:
            return self._match(key, "direct")
        stripped = normalize_name(strip_upload_noise(name))
        if stripped in self.by_name:
            return self._match(stripped, "noise-stripped")
        real = self.by_collapsed.get(collapse(stripped))
        if real is not None and len(real) == 1:
            return self._match(next(iter(real)), "de-concatenated")
        return CandidateMatch((), "none")

    def _match(self, key: str, tier: str) -> CandidateMatch:
        return CandidateMatch(self.by_name[key], tier, self.printed_langs.get(key, frozenset()))


def build_name_index(session: Session, stamp: tuple[int, ...] | None = None) -> NameIndex:
    """Read every printing once and file its card under every English and printed name it has."""
    stamp = stamp if stamp is not None else catalogue_stamp(session)
    # A card is identified by its normalised English name, which Scryfall gives every language's printing.
    printings_of: dict[str, dict[int, CandidatePrinting]] = defaultdict(dict)
    named: dict[str, set[str]] = defaultdict(set)  # key -> cards with that English (face) name
    printed: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))  # key -> card -> languages
    rows = session.execute(
        sa.select(Printing.id, Printing.name, Printing.face_names, Printing.printed_name, Printing.printed_face_names,
                  Printing.collector_number, Printing.lang, Expansion.code)
        .join(Expansion, Expansion.id == Printing.expansion_id)
    )
    for pid, name, faces, printed_name, printed_faces, number, lang, code in rows:
        lang = (lang or "en").lower()
        card = normalize_name(name)
        printings_of[card][pid] = CandidatePrinting(pid, code.lower(), normalize_collector_number(number), lang)
        for key in _english_keys(name, faces):
            named[key].add(card)
        for key in _printed_keys(printed_name, printed_faces):
            printed[key][card].add(lang)

    shared: dict[frozenset[str], tuple[CandidatePrinting, ...]] = {}

    def every_printing(cards: Iterable[str]) -> tuple[CandidatePrinting, ...]:
        wanted = frozenset(cards)
        if wanted not in shared:
            found = {pid: c for card in wanted for pid, c in printings_of[card].items()}
            shared[wanted] = tuple(sorted(found.values(), key=lambda c: c.id))
        return shared[wanted]

    by_name: dict[str, tuple[CandidatePrinting, ...]] = {}
    langs_of: dict[str, frozenset[str]] = {}
    for key, cards in named.items():
        # A printed name that is also another card's English name widens the candidates, never narrows them.
        by_name[key] = every_printing(cards | set(printed.get(key, ())))
    for key, langs_by_card in printed.items():
        if key in named:
            continue
        langs = frozenset(lang for langs in langs_by_card.values() for lang in langs)
        by_name[key] = _prefer_language(every_printing(langs_by_card), langs)
        langs_of[key] = langs

    collapsed: dict[str, set[str]] = defaultdict(set)
    for key in by_name:
        collapsed[collapse(key)].add(key)
    lexicon = frozenset(code.lower() for code in session.execute(sa.select(Expansion.code)).scalars())
    return NameIndex(
        stamp=stamp,
        by_name=by_name,
        by_collapsed={k: frozenset(v) for k, v in collapsed.items()},
        lexicon=lexicon,
        printed_langs=langs_of,
    )


def _prefer_language(candidates: tuple[CandidatePrinting, ...], langs: frozenset[str]) -> tuple[CandidatePrinting, ...]:
    """Where a set and number exist in the printed name's language, drop that slot's other languages.

    A German upload whose collector line gives no language would otherwise be matched to the
    English printing of the same set and number; slots without a printing in the language stay, so
    the card's sets stay known and never look like sets without it.
    """
    covered = {(c.set_code, c.number_key) for c in candidates if c.lang in langs}
    return tuple(c for c in candidates if c.lang in langs or (c.set_code, c.number_key) not in covered)


def _english_keys(name: str, faces: list[str] | None) -> Iterable[str]:
    yield normalize_name(name)
    face_list = [f for f in faces or () if isinstance(f, str)] or face_names(name)
    if len(face_list) > 1:
        for face in face_list:
            yield normalize_name(face)


def _printed_keys(printed_name: str | None, printed_faces: list[str] | None) -> Iterable[str]:
    for text in [printed_name, *(printed_faces or ())]:
        if isinstance(text, str) and (key := normalize_name(text)):
            yield key


_CACHE: dict[str, NameIndex] = {}
_LOCK = threading.Lock()


def _cache_key(session: Session) -> str:
    return session.get_bind().engine.url.render_as_string(hide_password=True)


def get_name_index(session: Session) -> NameIndex:
    """The cached index for this session's database, rebuilt only when the catalogue stamp moved."""
    key = _cache_key(session)
    stamp = catalogue_stamp(session)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached.stamp == stamp:
            return cached
    index = build_name_index(session, stamp)
    with _LOCK:
        _CACHE[key] = index
    return index


def invalidate_name_index() -> None:
    """Forget every cached index (the Scryfall import calls this after editing printings in place)."""
    with _LOCK:
        _CACHE.clear()
