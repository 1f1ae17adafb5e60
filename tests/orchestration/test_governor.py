"""The envelope steers by CPU contention before it trips, and an acknowledgement always resumes
(issue 10, items 1 and 3; issue 18, item 1).

Contention is what the test writes into a real pressure file in the kernel's PSI format, read by
the same reader the sensors use (``STAGE_E_CPU_PRESSURE_FILE``); the fallback's load average is set
with ``os.getloadavg``. The machine's own load must not decide a test. Time passing is the
governor's own timestamps moved back, never a sleep.
"""

from __future__ import annotations

import os
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from dagster import DagsterRun, DagsterRunStatus, SensorResult

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, CardClaim, EnvelopeTrip, PoolControl
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.contention import steer_by_contention
from stage_e_dagster.defs.run_queue import pool_limit
from stage_e_dagster.defs.sweep import launch_sweep
from stage_e_dagster.defs.tags import DISPATCH_POOL, dispatch_tags
from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
from stage_e_dagster.envelope.signals import CpuPressure
from stage_e_dagster.envelope.trips import acknowledge_trip, current_open_trip
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline
from .test_envelope_asset import latest_reading
from .test_streaming import counts, skip_text

# What the PSI file reads with our own two workers busy on two CPUs and nothing else (a few percent:
# the daemon's own ticks), and with a CPU-bound neighbour beside them (most of every 10 s).
OWN_WORKERS_ONLY = 4.0
BUSY_NEIGHBOUR = 95.0


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


@pytest.fixture
def pressure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PSI file the sensors read, with the shipped bars (soft 25, hard 75)."""
    path = tmp_path / "cpu.pressure"
    set_pressure(path, 0.0)
    monkeypatch.setenv("STAGE_E_CPU_PRESSURE_FILE", str(path))
    monkeypatch.delenv("STAGE_E_CPU_PRESSURE_CEILING")
    return path


def set_pressure(path: Path, some_avg10: float) -> None:
    path.write_text(
        f"some avg10={some_avg10:.2f} avg60={some_avg10:.2f} avg300={some_avg10:.2f} total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )


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


def latest_reading_after_tick(pipeline: Pipeline):  # type: ignore[no-untyped-def]
    """The envelope as the UI reads it after one envelope_trip_sensor tick."""
    pipeline.tick("envelope_trip_sensor")
    return latest_reading(pipeline)


def test_the_pressure_reader_takes_some_avg10_and_reads_none_without_a_file(tmp_path: Path) -> None:
    path = tmp_path / "cpu"
    set_pressure(path, 37.25)
    assert CpuPressure(path).read() == 37.25
    assert CpuPressure(tmp_path / "missing").read() is None and CpuPressure(None).read() is None
    path.write_text("some total=5\n")  # a line without avg10: no reading, not a crash
    assert CpuPressure(path).read() is None


def test_an_idle_system_under_a_busy_neighbour_opens_no_trip(pipeline: Pipeline, pressure: Path) -> None:
    set_pressure(pressure, 100.0)
    with pipeline.engine.begin() as conn:  # nothing waits: every card is done
        conn.execute(sa.update(Card).values(stage_c_pending=False, stage_d_pending=False))
    for _ in range(3):
        for name in ("card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor"):
            pipeline.tick(name)
    assert trips(pipeline) == [] and control(pipeline).governed_at is None  # never sampled


def test_two_busy_own_workers_and_no_contention_keep_concurrency_at_the_cap(
    pipeline: Pipeline, pressure: Path, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "1")
    set_pressure(pressure, OWN_WORKERS_ONLY)
    result = pipeline.tick("card_created_sensor")
    assert isinstance(result, SensorResult) and len(result.run_requests) == 2  # both slots of the cap
    for _ in range(4):  # the two runs go on; each decision finds only them on the CPUs
        later(pipeline, 10)
        pipeline.tick("card_created_sensor")
        assert control(pipeline).governed_limit == 2
    assert pool_limit(pipeline.instance) == 2 and trips(pipeline) == []
    values = {key: value.value for key, value in latest_reading_after_tick(pipeline).items()}
    assert values["cpu_pressure"] == OWN_WORKERS_ONLY and values["cpu_pressure_ceiling"] == 75.0
    assert values["cpu_pressure_soft_bar"] == 25.0 and values["governed_concurrency"] == 2


def test_without_psi_the_load_of_our_own_running_runs_is_not_contention(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_CPU_PRESSURE_FILE", "/nonexistent/cpu.pressure")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_CEILING", "2")
    settings = load_settings()
    set_load(monkeypatch, 2.3)  # two busy workers of ours and the daemon's own ticks
    mine = steer_by_contention(pipeline.engine, settings, own_running=2, now=utcnow())
    assert mine.governed.limit == 2 and "load beyond our runs 0.30" in mine.governed.reason
    later(pipeline, 10)
    theirs = steer_by_contention(pipeline.engine, settings, own_running=0, now=utcnow())  # the same load, none ours
    assert theirs.governed.limit == 1 and "load beyond our runs 2.30 > hard bar 2" in theirs.governed.reason


def test_without_psi_the_sensor_counts_this_instances_running_dispatch_runs(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_CPU_PRESSURE_FILE", "/nonexistent/cpu.pressure")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_CEILING", "2")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "1")
    set_load(monkeypatch, 2.3)
    tags = dispatch_tags(load_settings(), trigger_reason="card-created")
    for _ in range(2):  # two dispatch runs of ours going, as the run queue records them
        pipeline.instance.add_run(DagsterRun(job_name="stage_e_dispatch", run_id=str(uuid.uuid4()),
                                             status=DagsterRunStatus.STARTED, tags=tags))
    pipeline.tick("card_created_sensor")
    assert control(pipeline).governed_limit == 2  # 2.3 - 2 ours = 0.3: no contention
    later(pipeline, 10)
    for run in pipeline.instance.get_runs():
        pipeline.instance.report_run_failed(run)  # ours ended: the same load is someone else's
    pipeline.tick("card_created_sensor")
    assert control(pipeline).governed_limit == 1


def test_contention_halves_concurrency_recovers_it_and_trips_only_at_the_floor_after_the_sustained_period(
    pipeline: Pipeline, pressure: Path, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "1")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_TRIP_AFTER_S", "120")
    set_pressure(pressure, BUSY_NEIGHBOUR)
    result = pipeline.tick("card_created_sensor")
    assert isinstance(result, SensorResult) and len(result.run_requests) == 1  # halved: 2 -> 1
    [event] = result.asset_events
    assert event.metadata["governed_concurrency"].value == 1
    assert "cpu pressure 95.00 > hard bar 75" in event.metadata["governor"].value
    assert control(pipeline).governed_limit == 1 and pool_limit(pipeline.instance) == 1
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
        trip = current_open_trip(session)
        assert trip.detail["signal"] == "cpu_pressure" and trip.detail["ceiling"] == 75.0
        acknowledge_trip(session, trip.trip_id, note="neighbour moved", by="ops")
    set_pressure(pressure, 1.0)  # contention gone: concurrency climbs back by one per decision
    pipeline.tick("card_created_sensor")
    later(pipeline, 10)
    pipeline.tick("card_created_sensor")
    assert control(pipeline).governed_limit == 2 and pool_limit(pipeline.instance) == 2
    assert trips(pipeline) == ["host_load"]


def test_a_sweeps_runs_are_governed(pipeline: Pipeline, pressure: Path) -> None:
    """A sweep claims every card it batches, so no card is unclaimed while its backfill runs; the
    governor samples anyway and the pool the backfill launches through follows it."""
    launch = launch_sweep(pipeline.instance, defs.resolve_asset_graph(), load_settings(), max_batches=10)
    assert launch.backfill_id is not None
    with session_scope(pipeline.engine) as session:
        claimed = session.execute(sa.select(sa.func.count()).select_from(CardClaim)).scalar_one()
    assert claimed == counts(pipeline)["stage_c_pending"]  # nothing left unclaimed
    set_pressure(pressure, BUSY_NEIGHBOUR)
    pipeline.tick("card_created_sensor")
    assert control(pipeline).governed_limit == 1
    assert pool_limit(pipeline.instance) == 1  # the backfill daemon starts one sweep run at a time


def test_a_gap_in_sampling_restarts_the_sustained_period(pipeline: Pipeline, pressure: Path, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "1")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_TRIP_AFTER_S", "120")
    set_pressure(pressure, BUSY_NEIGHBOUR)
    pipeline.tick("card_created_sensor")  # 2 -> 1
    later(pipeline, 10)
    pipeline.tick("card_created_sensor")  # at the floor: the sustained period starts
    started = control(pipeline).over_hard_since
    assert started is not None
    later(pipeline, 200)  # nobody sampled for 200 s (the daemon was down, or nothing was waiting)
    pipeline.tick("card_created_sensor")
    assert trips(pipeline) == []  # one reading after the gap is not a sustained period
    restarted = control(pipeline).over_hard_since
    assert restarted is not None and restarted >= started  # from now, not from 210 s ago
    later(pipeline, 100)
    pipeline.tick("card_created_sensor")
    assert trips(pipeline) == []  # 100 s of a fresh 120
    later(pipeline, 30)
    pipeline.tick("card_created_sensor")
    assert trips(pipeline) == ["host_load"]  # sustained, with samples all the way: steering failed


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


@pytest.mark.postgres
def test_two_threaded_steers_in_one_pass_on_postgresql_halve_once(
    pg_engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 6: with threaded sensors both dispatch sensors sample in the same pass. Both pass
    the unlocked "steered recently?" probe; the second must see the first's decision under the row lock
    and keep it, not halve again (4 to 1 would reach the trip floor twice as fast)."""
    pressure = tmp_path / "cpu.pressure"
    set_pressure(pressure, BUSY_NEIGHBOUR)
    monkeypatch.setenv("STAGE_E_CPU_PRESSURE_FILE", str(pressure))
    monkeypatch.delenv("STAGE_E_CPU_PRESSURE_CEILING", raising=False)
    monkeypatch.setenv("STAGE_E_MAX_CONCURRENT_DISPATCHES", "4")
    settings = load_settings()
    with session_scope(pg_engine) as session:
        session.add(PoolControl(pool=DISPATCH_POOL, governed_limit=4, governed_at=utcnow() - timedelta(seconds=60)))
    import stage_e_dagster.defs.contention as governor

    real_read, both_sampled = governor.read_contention, threading.Barrier(2)

    def read_together(*args, **kwargs):  # type: ignore[no-untyped-def]
        sample = real_read(*args, **kwargs)
        both_sampled.wait(timeout=60)  # both sensors have passed the unlocked probe and sampled
        return sample

    monkeypatch.setattr(governor, "read_contention", read_together)
    now, limits = utcnow(), []
    threads = [threading.Thread(target=lambda: limits.append(
        steer_by_contention(pg_engine, settings, own_running=0, now=now).governed.limit)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    with session_scope(pg_engine) as session:
        governed = session.get(PoolControl, DISPATCH_POOL).governed_limit
    assert governed == 2, f"one pass halved the governed concurrency twice: 4 -> {governed}"
    assert sorted(limits) == [2, 2]
