"""The backstop sweep's walk: a persistent cursor over the whole backlog, empty only after a full lap.

A wrap of the cursor is not "done": the sweep says the backlog is empty only when one complete
lap, from id 0 to the end, found nothing to batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from ..catalog.models import MicroBatch, SweepCursor
from .batches import record_batch
from .claims import unclaimed_card_ids
from .sizing import BatchPlan

SWEEP_CURSOR = "backstop"
SWEEP_TRIGGER = "backstop-sweep"
# Each backlog is read through its own partial index; an OR of the two would walk the primary key.
BACKLOGS = (STAGE_C_PENDING, STAGE_D_PENDING)


@dataclass
class SweepWalk:
    batches: list[MicroBatch] = field(default_factory=list)
    laps_completed: int = 0
    empty_after_full_lap: bool = False
    position: int = 0
    card_count: int = 0  # cards in ``batches``


def _cursor(session: Session) -> SweepCursor:
    cursor = session.get(SweepCursor, SWEEP_CURSOR, with_for_update=True)
    if cursor is None:
        cursor = SweepCursor(name=SWEEP_CURSOR, position=0, lap=0, found_this_lap=0)
        session.add(cursor)
        session.flush()
    return cursor


def _backlog_exists(session: Session) -> bool:
    return any(session.execute(sa.select(sa.exists().where(predicate))).scalar_one() for predicate in BACKLOGS)


def _next_unclaimed(session: Session, *, now: datetime, limit: int, after_id: int) -> list[int]:
    """The next ``limit`` unclaimed ids above ``after_id`` waiting for either stage."""
    ids: set[int] = set()
    for predicate in BACKLOGS:
        ids.update(unclaimed_card_ids(session, predicate, now=now, limit=limit, after_id=after_id))
    return sorted(ids)[:limit]


def walk_backlog(
    session: Session,
    plan: BatchPlan,
    *,
    now: datetime,
    claim_ttl_s: int,
    progress: Callable[[int], None] | None = None,
) -> SweepWalk:
    """Batch up to ``plan.max_batches`` from the cursor on; wraps at the end and stops after one empty lap.

    ``progress`` gets the cards batched so far after each batch.
    """
    cursor = _cursor(session)
    walk = SweepWalk()
    while len(walk.batches) < plan.max_batches:
        ids = _next_unclaimed(session, now=now, limit=plan.batch_size, after_id=cursor.position)
        if ids:
            batch = record_batch(session, ids, trigger_reason=SWEEP_TRIGGER, now=now, claim_ttl_s=claim_ttl_s)
            cursor.position = max(ids)
            if batch is not None:
                walk.batches.append(batch)
                cursor.found_this_lap += len(batch.card_ids)
                walk.card_count += len(batch.card_ids)
                if progress is not None:
                    progress(walk.card_count)
            if len(ids) == plan.batch_size:
                continue
        # The end of the catalogue: one lap is over. Every lap starts at id 0, so a lap that batched
        # nothing, while no card waits at all (claimed ones included), is a full observed empty lap.
        lap_batched = cursor.found_this_lap
        cursor.lap += 1
        cursor.position = 0
        cursor.found_this_lap = 0
        walk.laps_completed += 1
        if lap_batched == 0:
            walk.empty_after_full_lap = not _backlog_exists(session)
            break
        if walk.laps_completed >= 2:
            break
    cursor.updated_at = now
    walk.position = cursor.position
    return walk
