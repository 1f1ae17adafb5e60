"""The dispatch sensors' side of the host-load governor: sample only with work waiting, steer, and show it.

Each change of the governed concurrency is an observation on ``stage_c_evidence`` (numeric
``governed_concurrency`` and ``host_load``, plotted by the UI) and a line in the tick's skip reason.
Decisions are at most one per ``STEER_EVERY``, however many sensors or daemons tick.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from dagster import AssetKey, AssetObservation

from ..catalog.engine import session_scope
from ..catalog.models import PoolControl
from ..dispatch.claims import unclaimed_card_ids
from ..dispatch.governing import Steering, steer
from ..envelope.governor import Governed
from ..envelope.signals import host_load
from ..settings import Settings
from .tags import DISPATCH_POOL

STEER_EVERY = timedelta(seconds=5)


def has_unclaimed(engine: sa.Engine, predicate: sa.ColumnElement[bool], *, now: datetime) -> bool:
    """Is any card of this backlog waiting for a batch? One index probe."""
    with session_scope(engine) as session:
        return bool(unclaimed_card_ids(session, predicate, now=now, limit=1))


def steer_by_load(engine: sa.Engine, settings: Settings, *, cap: int | None, now: datetime) -> Steering:
    """One governor decision from a fresh load sample, or the standing one if a decision is recent."""
    limit_cap = cap if cap is not None else settings.max_concurrent_dispatches
    with session_scope(engine) as session:
        control = session.get(PoolControl, DISPATCH_POOL)
        recent = control is not None and control.governed_at is not None and now - control.governed_at < STEER_EVERY
        if recent and control.governed_limit is not None:
            standing = Governed(min(control.governed_limit, limit_cap), control.over_hard_since, False, "")
            return Steering(standing, changed=False, trip_id=None)
        load = host_load()
        if load is None:  # no load average on this platform: nothing to steer by
            return Steering(Governed(limit_cap, None, False, "no host load reading"), changed=False, trip_id=None)
        return steer(session, settings, pool=DISPATCH_POOL, load=load, cap=limit_cap, now=now)


def governor_observation(steering: Steering) -> AssetObservation:
    return AssetObservation(
        asset_key=AssetKey("stage_c_evidence"),
        metadata={"governed_concurrency": steering.governed.limit, "governor": steering.governed.reason},
    )
