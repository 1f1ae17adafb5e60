"""The catalogue's collector keys, for Stage C to tell a confirmed reading from one worth a closer look.

Stage C reads an upload once cheaply and looks again, closer, only when that read holds no reading
the catalogue confirms: a set code it knows that holds the number read, or, with no set code, a set
whose printed size is the total read and which holds the number. The keys are read with one query
and kept per process and database until the catalogue's printings change (a cheap stamp).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa

from .collector_line import LineParse, normalize_collector_number
from .models import Expansion, Printing
from .stamp import catalogue_stamp


@dataclass(frozen=True)
class PrintedKeys:
    """Set codes, the numbers each set holds, and the sets of each printed size."""

    set_codes: frozenset[str]
    numbers: dict[str, frozenset[str]]
    sets_of_size: dict[int, frozenset[str]]

    def confirms(self, parse: LineParse) -> bool:
        """Whether the catalogue holds a printing at what ``parse`` read (set and number, or number and
        printed total)."""
        if parse.number is None:
            return False
        if parse.set_code is not None and parse.set_code_known:
            return parse.number in self.numbers.get(parse.set_code, frozenset())
        if parse.total is not None:
            return any(parse.number in self.numbers.get(code, frozenset())
                       for code in self.sets_of_size.get(parse.total, frozenset()))
        return False


def _build(conn: sa.Connection) -> PrintedKeys:
    numbers: dict[str, set[str]] = defaultdict(set)
    rows = conn.execute(sa.select(Expansion.code, Printing.collector_number)
                        .join(Expansion, Expansion.id == Printing.expansion_id))
    for code, number in rows:
        numbers[code.lower()].add(normalize_collector_number(number))
    sizes: dict[int, set[str]] = defaultdict(set)
    codes = set()
    for code, size in conn.execute(sa.select(Expansion.code, Expansion.printed_size)):
        codes.add(code.lower())
        if size:
            sizes[int(size)].add(code.lower())
    return PrintedKeys(frozenset(codes), {k: frozenset(v) for k, v in numbers.items()},
                       {k: frozenset(v) for k, v in sizes.items()})


_CACHE: dict[str, tuple[tuple[int, ...], PrintedKeys]] = {}
_LOCK = threading.Lock()


def printed_keys(engine: sa.Engine) -> PrintedKeys:
    """The keys of ``engine``'s catalogue, rebuilt only when its printings or sets changed."""
    key = engine.url.render_as_string(hide_password=True)
    with engine.connect() as conn:
        stamp = catalogue_stamp(conn)
        with _LOCK:
            cached = _CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        keys = _build(conn)
    with _LOCK:
        _CACHE[key] = (stamp, keys)
    return keys
