"""A hold and the backstop sweep: a sweep's queued runs wait behind the pool instead of being cancelled."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from dagster import DagsterRun, DagsterRunStatus, instance_for_test
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

from stage_e_dagster.defs.hold import hold_dispatch
from stage_e_dagster.defs.tags import BACKFILL_TAG, DISPATCH_TAG, PARTITION_TAG

QUEUED_COORDINATOR = {
    "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"},
    "concurrency": {"pools": {"granularity": "run", "default_limit": 2}},
}


def _queued_run(instance, job_name: str, **tags: str) -> str:
    run_id = str(uuid.uuid4())
    repository = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("stage_e"), "__repository__")
    origin = RemoteJobOrigin(repository, job_name)  # Dagster requires one for a queued run
    instance.add_run(
        DagsterRun(job_name=job_name, run_id=run_id, status=DagsterRunStatus.QUEUED, remote_job_origin=origin,
                   tags={DISPATCH_TAG: "micro-batch", PARTITION_TAG: f"mb-{run_id[:8]}", **tags})
    )
    return run_id


def test_a_hold_cancels_queued_sensor_runs_but_leaves_a_sweeps_runs_queued_behind_the_pool(
    sqlite_engine: sa.Engine,
) -> None:
    """A cancelled backfill run marks its partition failed for good (the backfill reads
    COMPLETED_FAILED although the sensors finish the cards later); held at pool limit 0 it runs
    after the acknowledgement and the backfill completes."""
    with instance_for_test(overrides=QUEUED_COORDINATOR) as instance:
        sensor_run = _queued_run(instance, "stage_e_dispatch")
        sweep_run = _queued_run(instance, "__ASSET_JOB", **{BACKFILL_TAG: "abcdefgh"})
        cancelled = hold_dispatch(instance, sqlite_engine, trip_id="trip-1", reason="trip trip-1 open")
        assert cancelled == 1
        assert instance.get_run_by_id(sensor_run).status == DagsterRunStatus.CANCELED
        assert instance.get_run_by_id(sweep_run).status == DagsterRunStatus.QUEUED
        assert instance.event_log_storage.get_concurrency_info("stage_e_dispatch").slot_count == 0


def test_a_refused_sweep_names_a_trip_that_stays_open(pipeline, monkeypatch) -> None:
    """The gate's fresh sample opens a trip when the fetch window is over its bar; the sweep's refusal
    names it, so the trip must be committed, not rolled back with the refused walk."""
    from stage_e_dagster.catalog.engine import session_scope
    from stage_e_dagster.catalog.models import EnvelopeTrip, MicroBatch
    from stage_e_dagster.definitions import defs
    from stage_e_dagster.defs.sweep import SweepRefused, launch_sweep
    from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
    from stage_e_dagster.settings import load_settings

    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_FETCH_FAILURE_WINDOW", "10")
    with session_scope(pipeline.engine) as session:
        for _ in range(5):
            record_fetch_outcome(session, "failed", status_code=500, host="images.example.org")
    try:
        launch_sweep(pipeline.instance, defs.resolve_asset_graph(), load_settings(), max_batches=5)
    except SweepRefused as refused:
        said = str(refused)
    else:
        raise AssertionError("a sweep over the fetch-failure bar launched")
    with session_scope(pipeline.engine) as session:
        trips = session.execute(sa.select(EnvelopeTrip)).scalars().all()
        batches = session.execute(sa.select(sa.func.count()).select_from(MicroBatch)).scalar_one()
    assert [(t.bar, t.acknowledged_at) for t in trips] == [("fetch_failure_rate", None)], said
    assert f"opened trip {trips[0].trip_id}" in said
    assert batches == 0  # the refused walk recorded nothing
