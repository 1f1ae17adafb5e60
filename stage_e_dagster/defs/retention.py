"""Retention: delete finished micro-batch partitions (and their catalogue rows) past an age.

Dagster slows past tens of thousands of dynamic partitions and has no bulk delete; events of a
deleted partition stay in the event log, so the ledger keeps its history.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from dagster import DagsterInstance

from ..catalog.engine import session_scope
from ..catalog.models import MicroBatch
from .partitions import micro_batches

FINISHED = ("succeeded", "failed", "abandoned")


def prune_batches(instance: DagsterInstance, engine: sa.Engine, *, finished_before: datetime) -> int:
    """Delete partitions and rows of batches that finished before the cutoff; returns how many."""
    with session_scope(engine) as session:
        keys = list(
            session.execute(
                sa.select(MicroBatch.batch_key).where(
                    MicroBatch.status.in_(FINISHED), MicroBatch.finished_at < finished_before
                )
            ).scalars()
        )
    existing = set(instance.get_dynamic_partitions(micro_batches.name))
    for key in keys:
        if key in existing:
            instance.delete_dynamic_partition(micro_batches.name, key)
    with session_scope(engine) as session:
        session.execute(sa.delete(MicroBatch).where(MicroBatch.batch_key.in_(keys)))
    return len(keys)
