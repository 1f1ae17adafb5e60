"""Where Dagster's run queue meets ours (issue 40, parts 2 and 3): a run Dagster created and never
started is failed after a bound and its batch requested again; the dispatch pool's limit row is never
deleted, a missing one is put back at the governed limit, and the run queue's own cap bounds a pass
that ignores the pool. Real sensor ticks on a real instance and catalogue; the queue's choices are
Dagster's own dequeue pass (``QueuedRunCoordinatorDaemon``) over real queued runs of the dispatch job.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
import yaml
from dagster import (
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    instance_for_test,
)
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.runs.schema import RunsTable
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import MicroBatch, PoolControl
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs import dagster_internals as internals
from stage_e_dagster.defs.hold import active_dispatch_runs, hold_dispatch, pool_limit, release_hold
from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML
from stage_e_dagster.defs.tags import DISPATCH_POOL, DISPATCH_TAG, PARTITION_TAG
from stage_e_dagster.envelope.trips import acknowledge_trip, open_trip

from .conftest import Pipeline


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


# --- part 2: a run Dagster created and never started ----------------------------------------------

def _created_not_started(instance: DagsterInstance, key: str, status: DagsterRunStatus) -> DagsterRun:
    """The run a sensor's request became, left where a failed hand-over to the queue leaves it."""
    run = DagsterRun(job_name="stage_e_dispatch", run_id=str(uuid.uuid4()), status=status,
                     tags={DISPATCH_TAG: "micro-batch", PARTITION_TAG: key, "dagster/run_key": key})
    return instance.add_run(run)


def _age_run(instance: DagsterInstance, run_id: str, by: timedelta) -> None:
    """As if time had passed: move the run's creation back in the instance's run storage."""
    record = instance.get_run_record_by_id(run_id)
    with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
        conn.execute(RunsTable.update().where(RunsTable.c.run_id == run_id)
                     .values(create_timestamp=record.create_timestamp - by))


def _age_batch(pipeline: Pipeline, key: str, by: timedelta) -> None:
    with session_scope(pipeline.engine) as session:
        batch = session.get(MicroBatch, key)
        batch.created_at -= by
        batch.requested_at -= by


@pytest.mark.parametrize("status", [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.MANAGED], ids=lambda s: s.value)
def test_a_run_never_started_is_failed_after_the_bound_and_its_batch_requested_again(
    pipeline: Pipeline, status: DagsterRunStatus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "5")
    first = pipeline.tick("card_created_sensor").run_requests
    assert len(first) == 2  # the ten cards, one batch per slot of the cap
    runs = {r.partition_key: _created_not_started(pipeline.instance, r.partition_key, status) for r in first}

    # Young, they count as going: the queue's places are taken and the batches wait for them.
    skipped = pipeline.tick("card_created_sensor")
    assert not isinstance(skipped, SensorResult) or not skipped.run_requests
    assert len(active_dispatch_runs(pipeline.instance)) == 2
    assert {pipeline.instance.get_run_by_id(r.run_id).status for r in runs.values()} == {status}

    # Past the bound (the instance's run-monitoring start timeout, 180 s here), as if 10 minutes had passed.
    for key, run in runs.items():
        _age_run(pipeline.instance, run.run_id, timedelta(minutes=10))
        _age_batch(pipeline, key, timedelta(minutes=11))
    again = pipeline.tick("card_created_sensor")
    assert isinstance(again, SensorResult), again
    for run in runs.values():
        after = pipeline.instance.get_run_by_id(run.run_id)
        assert after.status == DagsterRunStatus.FAILURE, after.status
    # Each batch requested again under a new run key (a run key is never reusable), attempt unspent.
    assert sorted(r.run_key for r in again.run_requests) == sorted(f"{key}@2" for key in runs)
    assert {r.tags["stage_e/attempt"] for r in again.run_requests} == {"1"}
    # The queue places are back: nothing of the failed runs counts as going.
    assert not {r.run_id for r in active_dispatch_runs(pipeline.instance)} & {r.run_id for r in runs.values()}


def test_a_young_run_not_started_and_other_jobs_runs_are_left_alone(pipeline: Pipeline) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    young = _created_not_started(pipeline.instance, request.partition_key, DagsterRunStatus.NOT_STARTED)
    other = pipeline.instance.add_run(DagsterRun(job_name="acknowledge_trip", run_id=str(uuid.uuid4())))
    _age_run(pipeline.instance, other.run_id, timedelta(hours=1))
    pipeline.tick("card_created_sensor")
    assert pipeline.instance.get_run_by_id(young.run_id).status == DagsterRunStatus.NOT_STARTED
    assert pipeline.instance.get_run_by_id(other.run_id).status == DagsterRunStatus.NOT_STARTED


def test_every_run_status_is_ended_or_not_and_managed_is_not_ended() -> None:
    """The project's two groups cover every status Dagster has, once each: a status a Dagster upgrade
    adds (or one Dagster leaves out of both of its lists, as MANAGED) counts as not ended."""
    ended, not_ended = set(internals.FINISHED_STATUSES), set(internals.NOT_FINISHED_STATUSES)
    assert ended | not_ended == set(DagsterRunStatus) and not ended & not_ended
    assert DagsterRunStatus.MANAGED in not_ended
    assert set(internals.UNSTARTED_STATUSES) == {DagsterRunStatus.NOT_STARTED, DagsterRunStatus.MANAGED}
    assert set(internals.ACTIVE_RUN_STATUSES) <= not_ended
