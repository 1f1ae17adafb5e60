"""Fetching ahead: one background thread fetches the next cards' bytes while the current card computes.

Bounded on purpose. Fetches start only when the Stage C loop asks, after its per-card guard let the
current card through, and for at most ``depth`` cards after it; so a stop (an open trip, a lockout)
wastes at most ``depth`` fetches. Every fetch of the loop goes through the one thread, one at a
time, so the host sees the same sequential requests as before, only earlier. The fetcher's HTTP
client may be shared between threads, and the pacer takes its own connection from the engine's
pool for each slot. The caller must not hold a catalogue transaction while it waits for a fetch
(on SQLite the pacer's write would wait for it).

A fetch's exception, :class:`FetchLockout` included, is raised where that card's fetch is asked
for, as if it had been fetched then. After a lockout the thread starts no other fetch.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import takewhile
from typing import Callable, Generic, Iterable, Protocol, TypeVar

from .fetch import FetchLockout, FetchResult


class Fetches(Protocol):
    def fetch(self, locator: str) -> FetchResult: ...


class _CardLike(Protocol):
    @property
    def locator(self) -> str: ...


V = TypeVar("V", bound=_CardLike)

# Answer of a fetch-ahead the thread did not make because a lockout came first.
_NOT_FETCHED = object()


class FetchAhead(Generic[V]):
    """Iterates the cards and fetches for them: ``fetch(locator)`` answers the current card from its
    fetch-ahead when there is one, and fetches now otherwise. ``depth`` 0 fetches inline, no thread.

    ``wanted`` says which cards are worth fetching ahead (a card Stage C will likely skip is not). A card
    ``stop`` says yes to ends the cards: neither it nor any after it is taken (a tail another batch took)."""

    def __init__(self, cards: Iterable[V], fetcher: Fetches, *, depth: int, wanted: Callable[[V], bool],
                 stop: Callable[[V], bool] | None = None):
        self._cards = iter(cards) if stop is None else takewhile(lambda card: not stop(card), cards)
        self._fetcher = fetcher
        self._depth = depth
        self._wanted = wanted
        self._ahead: deque[tuple[V, Future | None]] = deque()  # taken from ``cards``, not yet handed out
        self._current: tuple[V, Future | None] | None = None
        self._locked_out = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stage-c-fetch") if depth > 0 else None

    def __iter__(self) -> FetchAhead[V]:
        return self

    def __next__(self) -> V:
        """The next card. Starts no fetch: that waits for :meth:`start`, after the caller's guard."""
        self._current = self._ahead.popleft() if self._ahead else (next(self._cards), None)
        return self._current[0]

    def start(self, budget: int | None = None) -> None:
        """The current card passed the guard: fetch for it, and ahead for at most ``depth`` cards after it
        (and no more than ``budget`` more cards, when the caller will stop after that many)."""
        if self._pool is None or self._current is None or self._locked_out.is_set():
            return
        window = self._depth if budget is None else max(0, min(self._depth, budget))
        while len(self._ahead) < window:
            try:
                self._ahead.append((next(self._cards), None))
            except StopIteration:
                break
        view, future = self._current
        if future is None and self._wanted(view):
            self._current = (view, self._pool.submit(self._fetch_ahead, view.locator))
        for i in range(min(window, len(self._ahead))):
            view, future = self._ahead[i]
            if future is None and self._wanted(view):
                self._ahead[i] = (view, self._pool.submit(self._fetch_ahead, view.locator))

    def fetch(self, locator: str) -> FetchResult:
        """The current card's fetch: its fetch-ahead's answer (or exception), else a fetch made now."""
        if self._current is not None:
            view, future = self._current
            if future is not None and view.locator == locator:
                self._current = (view, None)
                result = future.result()
                if result is not _NOT_FETCHED:
                    return result
        if self._pool is None:
            return self._fetcher.fetch(locator)
        return self._pool.submit(self._fetcher.fetch, locator).result()

    def taken(self) -> list[V]:
        """The current card and the cards taken ahead of it: a fetch may have started for any of them."""
        return ([self._current[0]] if self._current is not None else []) + [view for view, _ in self._ahead]

    def unused_lockout(self) -> FetchLockout | None:
        """After the current card: if its fetch-ahead went unused (the card needed no fetch), cancel it
        if it has not started, else wait for it and return the 403 it met, if any, so the host's refusal
        is not lost."""
        if self._current is None or self._current[1] is None:
            return None
        view, future = self._current
        self._current = (view, None)
        future.cancel()
        return _lockout_of(future)

    def close(self) -> list[tuple[V, FetchLockout]]:
        """Stop: cancel fetches not started, wait for the one under way (at most one, within the fetch
        timeout), and return the 403s that fetches nobody used met, by card. Iterating afterwards
        still hands out the cards not reached, with no fetch."""
        unused = ([self._current] if self._current is not None else []) + list(self._ahead)
        for _, future in unused:
            if future is not None:
                future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        seen = [(view, exc) for view, future in unused if future is not None and (exc := _lockout_of(future))]
        self._current = None
        self._ahead = deque((view, None) for view, _ in self._ahead)
        return seen

    def _fetch_ahead(self, locator: str) -> object:
        if self._locked_out.is_set():
            return _NOT_FETCHED
        try:
            return self._fetcher.fetch(locator)
        except FetchLockout:
            self._locked_out.set()
            raise


def _lockout_of(future: Future) -> FetchLockout | None:
    if future.cancelled():
        return None
    exc = future.exception()
    return exc if isinstance(exc, FetchLockout) else None
