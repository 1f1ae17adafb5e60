"""Watching, inside an idle sensor tick, for the next card to land or batch to request.

Dagster's sensor daemon passes at most every 5 s, so a card committed just after an idle tick would
wait up to 5 s before any run is requested for it, more than half of its whole way to evidence. An
idle ``card_created_sensor`` tick instead keeps watching its backlog for ``STAGE_E_ARRIVAL_WAIT_S``
before it returns, one index probe every ``POLL_S``, and batches a card that lands meanwhile at once.

The same probe looks for a pending batch nobody has requested yet: the tail a running batch handed
to the idle slot (``dispatch.tail``), or a retry. The tick that watches is the reconciling one, so it
requests that batch at once instead of leaving the slot idle until the next pass.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from ..catalog.base import utcnow
from ..catalog.engine import read_scope
from ..catalog.models import MicroBatch
from .claims import unclaimed_query

# A quarter of a second between probes: a trickled card waits ~0.1 s on average for its batch, and
# one indexed probe (well under a millisecond on either database) costs nothing at that rate.
POLL_S = 0.25


# A batch recorded for a slot that no tick has requested: a split tail, a retry, or a batch whose
# request came to nothing (its run failed before taking it). Few rows: the (status, created_at) index.
UNREQUESTED = sa.select(MicroBatch.batch_key).where(
    MicroBatch.status == "pending", MicroBatch.requested_at.is_(None)).limit(1)


def wait_for_work(
    engine: sa.Engine,
    predicate: sa.ColumnElement[bool],
    *,
    until: float,
) -> bool:
    """Whether an unclaimed card of this backlog, or a pending batch never requested, turns up before
    ``until`` (a ``time.monotonic`` reading).

    Sleeps before each probe: the caller has just found nothing. Reads without locking (and on SQLite
    without the write lock): the tick that goes on to batch the card or request the batch does it with
    the usual compare-and-set, and another evaluator may still win it (the tick then stops watching)."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(POLL_S, left))
        with read_scope(engine) as session:  # on SQLite, no write lock for a probe every POLL_S
            if session.execute(unclaimed_query(predicate, now=utcnow(), limit=1)).first() is not None:
                return True
            if session.execute(UNREQUESTED).first() is not None:
                return True
