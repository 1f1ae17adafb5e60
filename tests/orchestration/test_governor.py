"""The envelope steers before it trips, and an acknowledgement always resumes (issue 10, items 1 and 3).

The host's load is set by the test (``os.getloadavg``): the machine's own load must not decide a
test. Time passing is the governor's own timestamps moved back, never a sleep.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import SensorResult

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, EnvelopeTrip, PoolControl
from stage_e_dagster.defs.tags import DISPATCH_POOL
from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
from stage_e_dagster.envelope.trips import acknowledge_trip, current_open_trip

from .conftest import Pipeline
from .test_streaming import counts, skip_text


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def set_load(monkeypatch: pytest.MonkeyPatch, load: float) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))


def control(pipeline: Pipeline) -> PoolControl:
    with session_scope(pipeline.engine) as session:
        return session.get(PoolControl, DISPATCH_POOL)


def later(pipeline: Pipeline, seconds: float) -> None:
    """As if ``seconds`` had passed since the governor's last decision."""
    with session_scope(pipeline.engine) as session:
        row = session.get(PoolControl, DISPATCH_POOL)
        row.governed_at -= timedelta(seconds=seconds)
        if row.over_hard_since is not None:
            row.over_hard_since -= timedelta(seconds=seconds)


def trips(pipeline: Pipeline) -> list[str]:
    with session_scope(pipeline.engine) as session:
        return list(session.execute(sa.select(EnvelopeTrip.bar)).scalars())


def test_an_idle_system_under_a_busy_neighbour_opens_no_trip(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_HOST_LOAD_CEILING", "1")
    set_load(monkeypatch, 9.0)
    with pipeline.engine.begin() as conn:  # nothing waits: every card is done
        conn.execute(sa.update(Card).values(stage_c_pending=False, stage_d_pending=False))
    for _ in range(3):
        for name in ("card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor"):
            pipeline.tick(name)
    assert trips(pipeline) == []


def test_load_halves_concurrency_recovers_it_and_trips_only_after_the_sustained_period_at_the_floor(
    pipeline: Pipeline, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_HOST_LOAD_CEILING", "4")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_SOFT", "3")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "1")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_TRIP_AFTER_S", "120")
    set_load(monkeypatch, 9.0)
    result = pipeline.tick("card_created_sensor")
    assert isinstance(result, SensorResult) and len(result.run_requests) == 1  # halved: 2 -> 1
    [event] = result.asset_events
    assert event.metadata["governed_concurrency"].value == 1
    assert control(pipeline).governed_limit == 1
    later(pipeline, 10)
    pipeline.tick("card_created_sensor")  # at the floor, over the hard bar: the sustained period starts
    assert trips(pipeline) == [] and control(pipeline).over_hard_since is not None
    later(pipeline, 100)
    pipeline.tick("card_created_sensor")  # 100 s of the 120: still steering, no trip
    assert trips(pipeline) == []
    later(pipeline, 30)
    text = skip_text(pipeline.tick("card_created_sensor"))
    assert "steering failed" in text and trips(pipeline) == ["host_load"]
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, current_open_trip(session).trip_id, note="neighbour moved", by="ops")
    set_load(monkeypatch, 0.5)  # load gone: concurrency climbs back by one per decision
    pipeline.tick("card_created_sensor")
    later(pipeline, 10)
    pipeline.tick("card_created_sensor")
    assert control(pipeline).governed_limit == 2
    assert trips(pipeline) == ["host_load"]


def test_an_ack_after_a_fetch_failure_trip_resumes_and_processes_every_held_card(pipeline: Pipeline) -> None:
    with session_scope(pipeline.engine) as session:
        for _ in range(6):  # over the bar (0.01 x 500 = 5 allowed)
            record_fetch_outcome(session, "failed", status_code=500, host="images.example.org")
    pipeline.tick("envelope_trip_sensor")
    with session_scope(pipeline.engine) as session:
        trip = current_open_trip(session)
        assert trip is not None and trip.bar == "fetch_failure_rate"
        acknowledge_trip(session, trip.trip_id, note="host fixed", by="ops")
    # The same old failures stay the newest outcomes, but no longer count: no new trip.
    for _ in range(3):
        pipeline.tick("envelope_trip_sensor")
    pipeline.drain()
    assert trips(pipeline) == ["fetch_failure_rate"]
    after = counts(pipeline)
    assert after["stage_c_pending"] == 0 and after["stage_d_pending"] == 0
