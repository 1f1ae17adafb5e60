"""Give printings an art hash from the art crops Scryfall serves, fetched through Stage C's guarded fetch.

The fallback calculator places a card by its art only when printings have an art hash; the importer
stores each printing's ``image_uris.art_crop``, and this fetches it, hashes it with the function
Stage C hashes an upload's art box with, and stores the hash with the URL it came from. Every
request goes through :class:`~stage_e_dagster.stage_c.fetch.ImageFetcher`: the host allow-list,
the global pacer (shared with every process that fetches from the host) and the byte ceiling. A
403 stops the run at once (the host is refusing us; more requests would only prolong the ban);
a host the settings do not allow stops it too, since every other printing would be refused alike.

Resumable and idempotent: a printing is pending while it has an art crop URL and no art hash, or a
hash taken from an older URL (Scryfall's URLs carry the image's version). What fails stays pending
for the next run; what was hashed is never fetched again.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import sqlalchemy as sa

from ..catalog.models import Printing
from ..stage_c.decode import decode_image
from ..stage_c.fetch import CONFIG_REFUSED, OK, THROTTLED, FetchLockout, ImageFetcher
from ..stage_c.hashing import phash_int

# Scryfall asks for 50-100 ms between requests, 10 requests per second on average, on its API and
# image hosts alike (https://scryfall.com/docs/api, "Rate Limits and Good Citizenship").
SCRYFALL_RATE_PER_SEC = 10.0
PAGE = 200  # pending rows read per query (keyset by id)


@dataclass
class ArtHashReport:
    """What one ``hash-art`` run did; ``stopped`` names why it ended early (``lockout``, ``host-not-allowed``)."""

    pending: int = 0
    hashed: int = 0
    throttled: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # by error class: not-found, timeout, not-an-image, ...
    stopped: str | None = None
    stop_detail: str | None = None
    elapsed_s: float = 0.0

    @property
    def rate_per_sec(self) -> float:
        return self.hashed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"pending": self.pending, "hashed": self.hashed, "throttled": self.throttled,
                "failed": dict(sorted(self.failed.items())), "stopped": self.stopped,
                "stop_detail": self.stop_detail, "elapsed_s": round(self.elapsed_s, 3),
                "hashed_per_sec": round(self.rate_per_sec, 2)}


def _pending() -> Any:
    return sa.and_(
        Printing.art_crop_url.is_not(None),
        sa.or_(Printing.art_phash.is_(None),
               sa.and_(Printing.art_phash_url.is_not(None), Printing.art_phash_url != Printing.art_crop_url)),
    )


def count_pending(engine: sa.Engine) -> int:
    """Printings that ``hash_art`` would fetch."""
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(Printing).where(_pending())).scalar_one())


def hash_art(engine: sa.Engine, fetcher: ImageFetcher, *, limit: int | None = None,
             progress: Callable[[int], None] | None = None) -> ArtHashReport:
    """Fetch and hash the art crop of every pending printing (at most ``limit``), one commit per printing.

    ``progress`` is told of each printing tried. Stops at the first 403 (``stopped="lockout"``) or
    when the settings refuse the host; the hashes stored before it stay.
    """
    report = ArtHashReport(pending=count_pending(engine))
    started = time.perf_counter()
    try:
        for printing_id, url in pending_rows(engine, Printing.id, Printing.art_crop_url, _pending(), limit):
            if not _hash_one(engine, fetcher, printing_id, url, report):
                return report
            if progress is not None:
                progress(1)
    finally:
        report.elapsed_s = time.perf_counter() - started
    return report


def pending_rows(engine: sa.Engine, id_column: Any, value_column: Any, pending: Any,
                 limit: int | None) -> Iterator[tuple[int, Any]]:
    """(id, value) of the rows ``pending`` holds for, in id order, at most ``limit``: read ``PAGE`` at a time
    by keyset, so a row done meanwhile (or failing, and still pending) is never read twice in one run."""
    after, tried = 0, 0
    while limit is None or tried < limit:
        with engine.connect() as conn:
            page = conn.execute(sa.select(id_column, value_column).where(pending, id_column > after)
                                .order_by(id_column).limit(PAGE)).all()
        if not page:
            return
        for row_id, value in page:
            if limit is not None and tried >= limit:
                return
            after, tried = row_id, tried + 1
            yield row_id, value


def fetched_body(fetcher: ImageFetcher, url: str, report: Any) -> bytes | str | None:
    """The body at ``url``; or why not, as a name: ``THROTTLED`` (the pacer has widened the interval, the row
    stays pending) or the fetch's error class; None when the run must stop, with ``report.stopped`` and
    ``report.stop_detail`` saying why (a 403, or a host the settings refuse)."""
    try:
        result = fetcher.fetch(url)
    except FetchLockout as exc:
        report.stopped, report.stop_detail = "lockout", str(exc)
        return None
    if result.outcome == CONFIG_REFUSED:
        report.stopped, report.stop_detail = result.error_class, result.detail
        return None
    if result.outcome == THROTTLED:
        return THROTTLED
    if result.outcome != OK or result.data is None:
        return result.error_class or result.outcome
    return result.data


def _hash_one(engine: sa.Engine, fetcher: ImageFetcher, printing_id: int, url: str, report: ArtHashReport) -> bool:
    """Fetch, hash and store one printing's art; False when the run must stop."""
    body = fetched_body(fetcher, url, report)
    if body is None:
        return False
    if body == THROTTLED:
        report.throttled += 1  # the printing stays pending
        return True
    if isinstance(body, str):
        report.failed[body] += 1
        return True
    decoded = decode_image(body)
    if decoded.image is None:
        report.failed[decoded.error or "not-an-image"] += 1
        return True
    art_hash = phash_int(decoded.image)
    with engine.begin() as conn:
        # Only while the printing still points at this URL: a re-import in between may have moved it.
        stored = conn.execute(
            sa.update(Printing).where(Printing.id == printing_id, Printing.art_crop_url == url)
            .values(art_phash=art_hash, art_phash_url=url)
        ).rowcount
    report.hashed += stored
    return True
