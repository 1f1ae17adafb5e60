"""Watching, inside an idle sensor tick, for the next card to land.

Dagster's sensor daemon passes at most every 5 s, so a card committed just after an idle tick would
wait up to 5 s before any run is requested for it, more than half of its whole way to evidence. An
idle ``card_created_sensor`` tick instead keeps watching its backlog for ``STAGE_E_ARRIVAL_WAIT_S``
before it returns, one index probe every ``POLL_S``, and batches a card that lands meanwhile at once.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from ..catalog.base import utcnow
from ..catalog.engine import read_scope
from .claims import unclaimed_query

# A quarter of a second between probes: a trickled card waits ~0.1 s on average for its batch, and
# one indexed probe (well under a millisecond on either database) costs nothing at that rate.
POLL_S = 0.25


def wait_for_unclaimed(
    engine: sa.Engine,
    predicate: sa.ColumnElement[bool],
    *,
    until: float,
) -> bool:
    """Whether an unclaimed card of this backlog turns up before ``until`` (a ``time.monotonic`` reading).

    Sleeps before each probe: the caller has just found nothing. Reads without locking (and on SQLite
    without the write lock): the tick that goes on to batch the card claims it with the usual
    compare-and-set, and another selector may still win it (the tick then stops watching)."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(POLL_S, left))
        with read_scope(engine) as session:  # on SQLite, no write lock for a probe every POLL_S
            if session.execute(unclaimed_query(predicate, now=utcnow(), limit=1)).first() is not None:
                return True
