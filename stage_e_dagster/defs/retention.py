"""Retention: finished micro-batches past an age lose their dynamic partition, then their catalogue row.

Dagster slows past tens of thousands of dynamic partitions and has no bulk delete; events of a
deleted partition stay in the event log, so the ledger keeps its history. The row is what finds
an old partition again, so it goes only once its partition is gone: a prune that stops halfway
leaves rows to finish next time, never a partition nothing points to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from dagster import DagsterInstance
from sqlalchemy.orm import Session

from ..catalog.engine import session_scope
from ..catalog.models import MicroBatch
from .dagster_internals import existing_partitions, partitions_unfinished_backfills_target
from .partitions import micro_batches

FINISHED = ("succeeded", "stopped", "failed", "abandoned")

# Batches the CLI handles per pass: its memory stays bounded however old the history is.
PRUNE_CHUNK = 500


@dataclass(frozen=True)
class ExpiredBatches:
    """Finished batches past the cutoff, split by whether Dagster still has their partition."""

    partitioned: list[str]
    unpartitioned: list[str]


def expired_batches(
    session: Session, instance: DagsterInstance, *, finished_before: datetime, limit: int
) -> ExpiredBatches:
    """At most ``limit`` finished batches that ended before the cutoff (read off the status and
    finished-at index, no ordering, so the query stops after ``limit`` rows). Which of them still
    have a partition is one read of Dagster's partitions table per chunk of keys, not one per key
    (and one read of the unfinished backfills, to keep the partitions any of them targets, whoever
    launched it):
    on PostgreSQL each storage call opens a connection, and a call per key made the retention ticks
    of bench/scale.py take 12-13 s."""
    rows = session.execute(
        sa.select(MicroBatch.batch_key)
        .where(MicroBatch.status.in_(FINISHED), MicroBatch.finished_at < finished_before)
        .limit(limit)
    ).scalars().all()
    # A partition an unfinished backfill still targets stays (deleting it would fail the backfill).
    targeted = partitions_unfinished_backfills_target(instance) if rows else set()
    keys = [key for key in rows if key not in targeted]
    existing = existing_partitions(instance, micro_batches.name, keys)
    return ExpiredBatches(partitioned=[k for k in keys if k in existing],
                          unpartitioned=[k for k in keys if k not in existing])


def forget_batches(session: Session, keys: list[str]) -> int:
    """Delete the catalogue rows of batches whose partitions are already gone; returns rows deleted."""
    if not keys:
        return 0
    result = session.execute(
        sa.delete(MicroBatch)
        .where(MicroBatch.batch_key.in_(keys), MicroBatch.status.in_(FINISHED))
        .execution_options(synchronize_session=False)
    )
    return result.rowcount or 0


def prune_batches(instance: DagsterInstance, engine: sa.Engine, *, finished_before: datetime) -> int:
    """Delete partitions, then rows, of batches that finished before the cutoff, a chunk at a time;
    returns how many batches went. For the CLI, which has no daemon to apply a delete request."""
    total = 0
    while True:
        with session_scope(engine) as session:
            expired = expired_batches(session, instance, finished_before=finished_before, limit=PRUNE_CHUNK)
        for key in expired.partitioned:
            instance.delete_dynamic_partition(micro_batches.name, key)
        with session_scope(engine) as session:
            total += forget_batches(session, expired.partitioned + expired.unpartitioned)
        if len(expired.partitioned) + len(expired.unpartitioned) < PRUNE_CHUNK:
            return total
