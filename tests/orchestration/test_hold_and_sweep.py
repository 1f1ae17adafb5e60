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
