"""Applying the contention governor's decision to the shared state, once per tick with work in hand.

The governed concurrency lives in the catalogue (``pool_controls``), read and written under a row
lock, so every sensor and daemon steers the same number. A sample is taken only while dispatch or
sweep work waits or runs: an idle system with a busy neighbour opens no trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from ..catalog.engine import dialect_insert
from ..catalog.models import PoolControl
from ..envelope.governor import Bars, Governed, govern
from ..envelope.signals import Contention
from ..envelope.trips import open_trip
from ..settings import Settings


@dataclass(frozen=True)
class Steering:
    governed: Governed
    changed: bool
    trip_id: str | None


def pool_control(session: Session, pool: str) -> PoolControl:
    """The pool's control row, created if missing, locked for this transaction."""
    session.execute(dialect_insert(session)(PoolControl).values(pool=pool).on_conflict_do_nothing(index_elements=["pool"]))
    control = session.get(PoolControl, pool, with_for_update=True, populate_existing=True)
    assert control is not None
    return control


def standing_concurrency(control: PoolControl | None, cap: int) -> int:
    """The governed concurrency last decided (at most ``cap``), or ``cap`` before any decision."""
    governed = control.governed_limit if control is not None else None
    return cap if governed is None else max(1, min(governed, cap))


def steer(
    session: Session, settings: Settings, *, pool: str, contention: Contention, cap: int, now: datetime
) -> Steering:
    """Record the governor's decision for this sample; opens a ``host_load`` trip when steering failed."""
    control = pool_control(session, pool)
    bars = Bars.for_signal(settings, contention.signal, cap)
    decision = govern(
        contention.value,
        bars,
        current=control.governed_limit,
        over_hard_since=control.over_hard_since,
        now=now,
        sampled_at=control.governed_at,
    )
    changed = decision.limit != control.governed_limit
    control.governed_limit, control.over_hard_since, control.governed_at = decision.limit, decision.over_hard_since, now
    trip_id = None
    if decision.trip:
        detail = {
            "signal": contention.signal,
            "observed": contention.value,
            "ceiling": bars.hard,
            "soft": bars.soft,
            "at_floor_since": decision.over_hard_since.isoformat() if decision.over_hard_since else None,
            "sustained_s": bars.trip_after_s,
        }
        trip_id = open_trip(session, "host_load", detail).trip_id
        control.over_hard_since = None  # a new trip after the ack needs a new sustained period
    return Steering(decision, changed, trip_id)
