"""The candidate name index: normalised card name -> the printings that carry that name.

Stage D only ever compares a card with printings of its own name (collector numbers alone are
ambiguous across sets). The index is built with one query and cached per process and database;
a cheap stamp (row counts and highest ids of printings and expansions) tells when to rebuild, so a
micro-batch pays one small query instead of a rebuild.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import Expansion, Printing
from .names import collapse, face_names, normalize_collector_number, normalize_name, strip_upload_noise


@dataclass(frozen=True)
class CandidatePrinting:
    id: int
    set_code: str
    number_key: str
    lang: str


@dataclass(frozen=True)
class CandidateMatch:
    """Which lookup tier matched: ``direct``, ``noise-stripped``, ``de-concatenated`` or ``none``."""

    candidates: tuple[CandidatePrinting, ...]
    tier: str


@dataclass
class NameIndex:
    stamp: tuple[int, ...]
    by_name: dict[str, tuple[CandidatePrinting, ...]]
    by_collapsed: dict[str, frozenset[str]]
    lexicon: frozenset[str]
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
            return CandidateMatch(self.by_name[key], "direct")
        stripped = normalize_name(strip_upload_noise(name))
        if stripped in self.by_name:
            return CandidateMatch(self.by_name[stripped], "noise-stripped")
        real = self.by_collapsed.get(collapse(stripped))
        if real is not None and len(real) == 1:
            return CandidateMatch(self.by_name[next(iter(real))], "de-concatenated")
        return CandidateMatch((), "none")


def catalogue_stamp(session: Session) -> tuple[int, ...]:
    """Counts and highest ids of printings and expansions: changes whenever rows are added or removed."""
    row = session.execute(
        sa.select(
            sa.select(sa.func.count()).select_from(Printing).scalar_subquery(),
            sa.select(sa.func.coalesce(sa.func.max(Printing.id), 0)).scalar_subquery(),
            sa.select(sa.func.count()).select_from(Expansion).scalar_subquery(),
            sa.select(sa.func.coalesce(sa.func.max(Expansion.id), 0)).scalar_subquery(),
        )
    ).one()
    return tuple(int(v) for v in row)


def build_name_index(session: Session, stamp: tuple[int, ...] | None = None) -> NameIndex:
    """Read every printing once and index it under its full name and each face's name."""
    stamp = stamp if stamp is not None else catalogue_stamp(session)
    grouped: dict[str, dict[int, CandidatePrinting]] = defaultdict(dict)
    rows = session.execute(
        sa.select(Printing.id, Printing.name, Printing.collector_number, Printing.lang, Expansion.code)
        .join(Expansion, Expansion.id == Printing.expansion_id)
    )
    for pid, name, number, lang, code in rows:
        candidate = CandidatePrinting(pid, code.lower(), normalize_collector_number(number), (lang or "en").lower())
        for variant in _name_variants(name):
            grouped[variant][pid] = candidate
    by_name = {key: tuple(sorted(found.values(), key=lambda c: c.id)) for key, found in grouped.items()}
    collapsed: dict[str, set[str]] = defaultdict(set)
    for key in by_name:
        collapsed[collapse(key)].add(key)
    lexicon = frozenset(code.lower() for code in session.execute(sa.select(Expansion.code)).scalars())
    return NameIndex(
        stamp=stamp,
        by_name=by_name,
        by_collapsed={k: frozenset(v) for k, v in collapsed.items()},
        lexicon=lexicon,
    )


def _name_variants(name: str) -> Iterable[str]:
    yield normalize_name(name)
    faces = face_names(name)
    if len(faces) > 1:
        for face in faces:
            yield normalize_name(face)


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
