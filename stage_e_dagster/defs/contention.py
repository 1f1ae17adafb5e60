"""The dispatch sensors' side of the contention governor: sample only with work in hand, steer, and show it.

Each change of the governed concurrency is an observation on ``stage_c_evidence`` (numeric
``governed_concurrency``, plotted by the UI) and a line in the tick's skip reason. Decisions are at
most one per ``STEER_EVERY``, however many sensors or daemons tick. The dispatch pool's limit
follows the governed concurrency, so a sweep's backfill runs are governed like the sensors' own.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from dagster import AssetKey, AssetObservation

from ..catalog.engine import read_scope, session_scope
from ..catalog.models import MicroBatch, PoolControl
from ..dispatch.batches import IN_FLIGHT
from ..dispatch.claims import unclaimed_card_ids
from ..dispatch.steering import Steering, pool_control, standing_concurrency, steer
from ..envelope.governor import Governed
from ..envelope.signals import CpuPressure, PressureSource, read_contention
from ..settings import Settings
from .tags import DISPATCH_POOL

STEER_EVERY = timedelta(seconds=5)


def has_unclaimed(engine: sa.Engine, predicate: sa.ColumnElement[bool], *, now: datetime) -> bool:
    """Is any card of this backlog waiting for a batch? One index probe."""
    with read_scope(engine) as session:
        return bool(unclaimed_card_ids(session, predicate, now=now, limit=1))


def has_batch_in_flight(engine: sa.Engine) -> bool:
    """Is any batch waiting for its run or running? A sweep claims every card it batches, so while its
    backfill runs nothing is unclaimed, yet its runs load the host. One probe of the status index."""
    with read_scope(engine) as session:
        probe = sa.select(MicroBatch.batch_key).where(MicroBatch.status.in_(IN_FLIGHT)).limit(1)
        return session.execute(probe).first() is not None


def standing_limit(engine: sa.Engine, cap: int) -> int:
    """The governed concurrency last decided (at most ``cap``), or ``cap`` before any decision."""
    with session_scope(engine) as session:
        return standing_concurrency(session.get(PoolControl, DISPATCH_POOL), cap)


def steer_by_contention(
    engine: sa.Engine,
    settings: Settings,
    *,
    own_running: int,
    now: datetime,
    pressure: PressureSource | None = None,
) -> Steering:
    """One governor decision from a fresh contention sample, or the standing one if a decision is recent.

    ``own_running`` is how many dispatch runs this instance has going (the fallback's own share of
    the load); ``pressure`` defaults to the PSI file of the settings."""
    cap = settings.max_concurrent_dispatches
    source = pressure if pressure is not None else CpuPressure(settings.cpu_pressure_file)
    with session_scope(engine) as session:
        # Unlocked first: most ticks of a pass find a recent decision and neither sample nor lock.
        standing = _recent_decision(session.get(PoolControl, DISPATCH_POOL), cap=cap, now=now)
    if standing is not None:
        return standing
    contention = read_contention(source, own_running=own_running)
    if contention is None:  # neither PSI nor a load average on this platform: nothing to steer by
        return Steering(Governed(cap, None, False, "no contention reading"), changed=False, trip_id=None)
    with session_scope(engine) as session:
        # Again under the row lock: threaded sensors (or two daemons) that passed the unlocked probe
        # together must take one step per pass, not one each.
        standing = _recent_decision(pool_control(session, DISPATCH_POOL), cap=cap, now=now)
        if standing is not None:
            return standing
        return steer(session, settings, pool=DISPATCH_POOL, contention=contention, cap=cap, now=now)


def _recent_decision(control: PoolControl | None, *, cap: int, now: datetime) -> Steering | None:
    """The standing decision when one was taken less than ``STEER_EVERY`` ago, else ``None``."""
    if control is None or control.governed_at is None or control.governed_limit is None:
        return None
    if now - control.governed_at >= STEER_EVERY:
        return None
    standing = Governed(min(control.governed_limit, cap), control.over_hard_since, False, "")
    return Steering(standing, changed=False, trip_id=None)


def governor_observation(steering: Steering) -> AssetObservation:
    return AssetObservation(
        asset_key=AssetKey("stage_c_evidence"),
        metadata={"governed_concurrency": steering.governed.limit, "governor": steering.governed.reason},
    )
