"""Stage C over many cards with several worker processes (BULK mode).

Cards are handed out in small chunks; each worker runs :func:`run_stage_c` on its chunk with its
own engine and fetcher, so throughput scales with cores while the fetch pacer still holds the
request rate for all of them together. A lockout in any chunk stops the hand-out.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict
from typing import Callable, Sequence

import sqlalchemy as sa

from ..catalog.backlog import STAGE_C_PENDING
from ..catalog.engine import engine_for
from ..catalog.models import Card
from ..settings import Settings
from .fetch import ImageFetcher
from .huge_pages import for_child_processes
from .lexicon import known_set_codes
from .run import LockoutInfo, StageCReport, run_stage_c

CHUNK_SIZE = 16

_worker_fetcher: ImageFetcher | None = None


def backlog_ids(engine: sa.Engine, limit: int | None) -> list[int]:
    """Ids of the Stage C backlog, by id (what a BULK pass over the backlog covers)."""
    query = sa.select(Card.id).where(STAGE_C_PENDING).order_by(Card.id)
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as conn:
        return list(conn.execute(query).scalars())


def _run_chunk(settings: Settings, ids: list[int], writer: str, run_id: str | None,
               lexicon: frozenset[str], skip_leased: bool) -> dict[str, object]:
    global _worker_fetcher
    engine = engine_for(settings.database_url)
    if _worker_fetcher is None:
        _worker_fetcher = ImageFetcher.from_settings(settings, engine)
    report = run_stage_c(engine, ids, writer=writer, run_id=run_id, fetcher=_worker_fetcher, lexicon=lexicon,
                         skip_leased=skip_leased, ocr_pass=settings.ocr_pass)
    return asdict(report)


def _merge(total: StageCReport, part: dict[str, object]) -> None:
    for name in ("attempted", "completed", "skipped_current", "fetch_failures", "throttled", "terminal", "rejected",
                 "config_refused", "not_yet_eligible", "claimed_elsewhere"):
        setattr(total, name, getattr(total, name) + int(part[name]))  # type: ignore[call-overload]
    total.deferred_card_ids.extend(part["deferred_card_ids"])  # type: ignore[arg-type]
    if part["lockout"] is not None and total.lockout is None:
        total.lockout = LockoutInfo(**part["lockout"])  # type: ignore[arg-type]


def run_stage_c_pool(settings: Settings, card_ids: Sequence[int] | None, *, workers: int, writer: str,
                     run_id: str | None, limit: int | None = None,
                     progress: Callable[[int], None] | None = None, skip_leased: bool = False) -> StageCReport:
    """Run Stage C on ``card_ids`` (None: the backlog) with ``workers`` processes; one merged report.

    After a lockout no further chunk is started; chunks already running finish, and every card
    of an unstarted chunk is listed as deferred.
    """
    engine = engine_for(settings.database_url)
    ids = list(card_ids)[:limit] if card_ids is not None else backlog_ids(engine, limit)
    chunks = [ids[i:i + CHUNK_SIZE] for i in range(0, len(ids), CHUNK_SIZE)]
    lexicon = known_set_codes(engine)
    total = StageCReport()
    context = multiprocessing.get_context("spawn")
    # The workers start on demand while the pool is open: each reads the huge-page tunable as it starts.
    with for_child_processes(), ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: dict[Future[dict[str, object]], list[int]] = {}
        queue = list(reversed(chunks))
        while queue or pending:
            while queue and len(pending) < workers * 2 and total.lockout is None:
                chunk = queue.pop()
                pending[pool.submit(_run_chunk, settings, chunk, writer, run_id, lexicon, skip_leased)] = chunk
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                chunk = pending.pop(future)
                _merge(total, future.result())
                if progress is not None:
                    progress(len(chunk))
            if total.lockout is not None and queue:
                total.deferred_card_ids.extend(card_id for chunk in reversed(queue) for card_id in chunk)
                queue.clear()
    return total
