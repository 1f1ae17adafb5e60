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
from .dagster_internals import backfill_status, existing_partitions, runs
from .hold import ACTIVE_STATUSES
from .partitions import micro_batches
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
    index; those whose partition exists and has no run queued or going are returned for deletion.
    The pass stops at the first batch that still has a run going, or whose sweep's backfill has not
    finished, to look at it again next time.

    A batch abandoned less than ``grace`` ago is left for a later tick: the transaction that abandoned
    it may still be committing (so the keyset would step over it), and its run may be settling."""
    query = sa.select(MicroBatch.batch_key, MicroBatch.finished_at, MicroBatch.backfill_id).where(
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
    keys = [key for key, _, _ in rows]
    going = (
        {run.tags.get(PARTITION_TAG) for run in runs(instance, RunsFilter(tags={PARTITION_TAG: keys},
                                                                           statuses=ACTIVE_STATUSES))}
        if keys
        else set()
    )
    existing = existing_partitions(instance, micro_batches.name, keys)
    delete: list[str] = []
    cursor = after
    live_backfills = backfills_not_finished(instance, {b for _, _, b in rows if b})
    for key, finished_at, backfill_id in rows:
        # A backfill that has not finished still targets the partition: deleting it fails the backfill
        # and cancels its queued runs, though the batch's cards were done under other keys.
        if key in going or backfill_id in live_backfills:
            break
        if key in existing:
            delete.append(key)
        cursor = (finished_at, key)
    return AbandonedPartitions(delete=delete, cursor=cursor)


# Backfill statuses after which the backfill daemon no longer reads the backfill's partitions.
BACKFILL_FINISHED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}


def backfills_not_finished(instance: DagsterInstance, backfill_ids: set[str]) -> set[str]:
    """Which of these backfills may still read their partitions (one read per backfill). A backfill
    Dagster does not know (a sweep that never submitted it) targets nothing."""
    return {b for b in backfill_ids if (backfill_status(instance, b) or "COMPLETED") not in BACKFILL_FINISHED}
