"""Reconciling marks as requested only the batches the tick emits (issue 31 item 7).

A batch marked requested waits ``REQUEST_GRACE`` before it is requested again, so one marked but not
emitted (beyond the per-tick limit, or in a tick that opened a trip) sat idle for a minute each cycle.
Real sensor ticks on a real instance and catalogue.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, MicroBatch, PoolControl
from stage_e_dagster.defs.tags import DISPATCH_POOL
from stage_e_dagster.dispatch.batches import record_batch
from stage_e_dagster.dispatch.sizing import max_batches_per_tick
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline
from .test_governor import BUSY_NEIGHBOUR, set_pressure


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def _unrequested_batches(pipeline: Pipeline) -> list[str]:
    """One unrequested batch per card (as retries are recorded), more than a tick may emit."""
    now = utcnow()
    with session_scope(pipeline.engine) as session:
        ids = list(session.execute(sa.select(Card.id).order_by(Card.id)).scalars())
        keys = [record_batch(session, [cid], trigger_reason="card-created", now=now, claim_ttl_s=600,
                             key=f"b{cid:04d}", requested=False).batch_key for cid in ids]
    assert len(keys) > max_batches_per_tick(load_settings())
    return keys


def _requested(pipeline: Pipeline) -> set[str]:
    with session_scope(pipeline.engine) as session:
        marked = sa.select(MicroBatch.batch_key).where(MicroBatch.requested_at.is_not(None))
        return set(session.execute(marked).scalars())


def test_a_tick_marks_requested_only_the_batches_it_emits(pipeline: Pipeline) -> None:
    keys = _unrequested_batches(pipeline)
    result = pipeline.tick("card_created_sensor")
    emitted = {request.partition_key for request in result.run_requests}
    assert len(emitted) == max_batches_per_tick(load_settings())
    assert _requested(pipeline) == emitted, f"marked {len(_requested(pipeline))} requested, emitted {len(emitted)}"
    following = {request.partition_key for request in pipeline.tick("card_created_sensor").run_requests}
    assert following == set(keys) - emitted, "the batches left over waited out the request grace"


def test_a_tick_whose_steering_opens_a_trip_marks_nothing_requested(
    pipeline: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pressure = tmp_path / "cpu.pressure"
    set_pressure(pressure, BUSY_NEIGHBOUR)
    monkeypatch.setenv("STAGE_E_CPU_PRESSURE_FILE", str(pressure))
    monkeypatch.delenv("STAGE_E_CPU_PRESSURE_CEILING")
    _unrequested_batches(pipeline)
    now = utcnow()
    with session_scope(pipeline.engine) as session:  # at the floor, over the hard bar for long enough
        session.add(PoolControl(pool=DISPATCH_POOL, governed_limit=1, governed_at=now - timedelta(seconds=6),
                                over_hard_since=now - timedelta(hours=1)))
    result = pipeline.tick("card_created_sensor")
    assert not result.run_requests and "opened trip" in result.skip_reason.skip_message
    assert _requested(pipeline) == set(), "a tick that emitted nothing marked batches requested"
