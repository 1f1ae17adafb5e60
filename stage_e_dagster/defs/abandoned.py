"""Abandoned batches lose their dynamic partition once no run of theirs is going.

An abandoned batch put its cards back in the backlog, and other batches processed them under their
own keys; its partition would otherwise stay in the asset view as failed (a cancelled run) or
missing, for work that was in fact done. The events of a deleted partition stay in the event log,
so the ledger keeps the abandonment; the batch row stays until retention removes it with the other
finished batches (``defs.retention`` finds it by its row, with or without a partition).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from dagster import DagsterInstance, RunsFilter
from sqlalchemy.orm import Session

from ..catalog.models import MicroBatch
from .dagster_internals import existing_partitions, partitions_unfinished_backfills_target, runs
from .partitions import micro_batches
from .run_queue import ACTIVE_STATUSES
from .tags import PARTITION_TAG


@dataclass(frozen=True)
class AbandonedPartitions:
    """Partitions to delete now, and where the next pass starts (after the last batch dealt with)."""

    delete: list[str]
    cursor: tuple[datetime, str] | None


def load_cursor(raw: str | None) -> tuple[datetime, str] | None:
    data = json.loads(raw) if raw else {}
    after = data.get("abandoned_after")
    return (datetime.fromisoformat(after[0]), str(after[1])) if after else None


def dump_cursor(cursor: tuple[datetime, str] | None) -> str:
    return json.dumps({"abandoned_after": [cursor[0].isoformat(), cursor[1]] if cursor else None})


def abandoned_partitions(
    session: Session,
    instance: DagsterInstance,
    *,
    after: tuple[datetime, str] | None,
    now: datetime,
    limit: int,
    grace: timedelta = timedelta(seconds=60),
) -> AbandonedPartitions:
    """The next ``limit`` abandoned batches by (finished at, key), read off the status and finished-at
    index; those whose partition exists, has no run queued or going and is targeted by no unfinished
    backfill (whoever launched it) are returned for deletion. A batch that must wait holds back only
    itself: the cursor stays before the first one, so the next pass looks at it again, and the pass goes
    on deleting the batches after it (at most ``limit`` read per pass).

    A batch abandoned less than ``grace`` ago is left for a later tick: the transaction that abandoned
    it may still be committing (so the keyset would step over it), and its run may be settling."""
    query = sa.select(MicroBatch.batch_key, MicroBatch.finished_at).where(
        MicroBatch.status == "abandoned", MicroBatch.finished_at < now - grace
    )
    if after is not None:
        query = query.where(
            sa.or_(
                MicroBatch.finished_at > after[0],
                sa.and_(MicroBatch.finished_at == after[0], MicroBatch.batch_key > after[1]),
            )
        )
    rows = session.execute(query.order_by(MicroBatch.finished_at, MicroBatch.batch_key).limit(limit)).all()
    keys = [key for key, _ in rows]
    going = (
        {run.tags.get(PARTITION_TAG) for run in runs(instance, RunsFilter(tags={PARTITION_TAG: keys},
                                                                           statuses=ACTIVE_STATUSES))}
        if keys
        else set()
    )
    existing = existing_partitions(instance, micro_batches.name, keys)
    # A backfill that has not finished still targets the partition: deleting it fails the backfill and
    # cancels its queued runs, though the batch's cards were done under other keys.
    targeted = partitions_unfinished_backfills_target(instance) if keys else set()
    delete: list[str] = []
    cursor, waiting = after, False
    for key, finished_at in rows:
        if key in going or key in targeted:
            waiting = True  # looked at again next pass: the cursor stays before it
            continue
        if key in existing:
            delete.append(key)
        if not waiting:
            cursor = (finished_at, key)
    return AbandonedPartitions(delete=delete, cursor=cursor)


# Backfill statuses after which the backfill daemon no longer reads the backfill's partitions (the rest
# are ``dagster_internals.UNFINISHED_BACKFILL_STATUSES``).
BACKFILL_FINISHED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
