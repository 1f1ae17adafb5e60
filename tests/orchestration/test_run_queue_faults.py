"""Where Dagster's run queue meets ours (issue 40, parts 2 and 3): a run Dagster created and never
started is failed after a bound and its batch requested again; the dispatch pool's limit row is never
deleted, a missing one is put back at the governed limit, and the run queue's own tag limit on dispatch
runs holds the cap on a pass that ignores the pool. Real sensor ticks on a real instance and catalogue;
the queue's choices are Dagster's own dequeue pass (``QueuedRunCoordinatorDaemon``) over real queued
runs of the dispatch job.
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
    RunsFilter,
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
from stage_e_dagster.defs.hold import release_hold
from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML
from stage_e_dagster.defs.run_queue import active_dispatch_runs, pool_limit
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


# --- part 3: the pool never opens wide ----------------------------------------------------------

SHIPPED = yaml.safe_load(EMBEDDED_INSTANCE_YAML.read_text(encoding="utf-8"))
# The shipped instance's run queue (Dagster's queued run coordinator) and concurrency settings.
SHIPPED_QUEUE = {
    "run_queue": SHIPPED["run_queue"],
    "concurrency": SHIPPED["concurrency"],
}
CAP = 2  # STAGE_E_MAX_CONCURRENT_DISPATCHES in the pipeline fixture, the shipped default_limit
ORIGIN = RemoteJobOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("stage_e_dagster"), "__repository__"),
                         "stage_e_dispatch")


@pytest.fixture
def queued(pipeline: Pipeline) -> Pipeline:
    """The pipeline's catalogue on an instance with Dagster's run queue and the shipped queue settings."""
    with instance_for_test(overrides=SHIPPED_QUEUE) as instance:
        yield Pipeline(url=pipeline.url, engine=pipeline.engine, instance=instance, images=pipeline.images)


def _sweep_queue(instance: DagsterInstance, runs: int) -> list[str]:
    """Queued runs of the dispatch job as a sweep leaves them: each needs a slot of the dispatch pool."""
    job = defs.resolve_job_def("stage_e_dispatch")
    ids = []
    for i in range(runs):
        run = instance.create_run_for_job(
            job_def=job, status=DagsterRunStatus.QUEUED, remote_job_origin=ORIGIN,
            tags={DISPATCH_TAG: "micro-batch", PARTITION_TAG: f"mb-sweep-{i:03d}", "dagster/backfill": "abcdefgh"},
        )
        assert run.run_op_concurrency is not None and DISPATCH_POOL in run.run_op_concurrency.all_pools
        ids.append(run.run_id)
    return ids


def dequeue_pass(instance: DagsterInstance) -> int:
    """One pass of Dagster's run queue: the runs its own dequeue logic picks, each marked STARTING as its
    launch would (the worker process is left out). Returns how many it picked."""
    daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
    picked = daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), fixed_iteration_time=None)
    for run in picked:
        instance.report_dagster_event(
            DagsterEvent(event_type_value=DagsterEventType.RUN_STARTING.value, job_name=run.job_name), run.run_id
        )
    return len(picked)


def going(instance: DagsterInstance) -> int:
    return sum(1 for run in active_dispatch_runs(instance) if run.status in internals.ACTIVE_RUN_STATUSES)


def test_a_release_after_a_hold_that_found_no_limit_never_leaves_the_pool_row_missing(queued: Pipeline) -> None:
    """The hold came before any dispatch tick set the pool (so it recorded no limit of its own to give
    back); the acknowledgement's release used to delete the row, and Dagster's next pass, which ignores a
    pool whose row it has to create, launched the whole queue at once."""
    instance, engine = queued.instance, queued.engine
    _sweep_queue(instance, 22)
    with session_scope(engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    queued.tick("card_created_sensor")  # the hold: pool to 0; a sweep's queued runs stay queued
    with session_scope(engine) as session:
        assert session.get(PoolControl, DISPATCH_POOL).held_from is None
    assert pool_limit(instance) == 0 and dequeue_pass(instance) == 0
    with session_scope(engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="ops")
    queued.tick("envelope_trip_sensor")  # gives the hold back; no dispatch tick comes before the passes
    assert pool_limit(instance) == CAP, "the release left the pool without a limit of its own"
    peak = 0
    for _ in range(5):  # the passes of the run queue before the next dispatch tick
        dequeue_pass(instance)
        peak = max(peak, going(instance))
    assert peak == CAP, f"{peak} dispatch runs going at once for a cap of {CAP}"


def test_a_pool_row_an_operator_deletes_is_put_back_and_the_run_queue_holds_the_pass_that_ignored_it(
    queued: Pipeline,
) -> None:
    """The UI's delete (``delete_concurrency_limit``) with 22 queued and the cap's runs going: Dagster's
    next pass ignores the pool; the shipped tag limit on dispatch runs holds that pass at the cap, and the
    next dispatch tick puts the row back at the governed limit."""
    instance = queued.instance
    backstop = internals.run_queue_limit(instance)
    assert backstop is not None and backstop >= CAP + 1, "the shipped run queue leaves the acknowledge job no room"
    queued.tick("card_created_sensor")
    assert pool_limit(instance) == CAP
    _sweep_queue(instance, 22)
    assert dequeue_pass(instance) == CAP and going(instance) == CAP
    internals.delete_pool_limit(instance, DISPATCH_POOL)  # what the UI's "delete" does
    assert dequeue_pass(instance) == 0, f"{going(instance)} dispatch runs going for a cap of {CAP}"
    queued.tick("card_created_sensor")
    assert pool_limit(instance) == CAP, "the dispatch tick did not put the pool's own limit back"
    assert dequeue_pass(instance) == 0


def _dispatch_queue(instance: DagsterInstance, runs: int) -> list[str]:
    """Queued dispatch runs tagged as Dagster tags them: in turn a sensor's run request (resolved against the
    job, ``RunRequest.with_resolved_tags_and_config``), a run of the project's sweep and a run of a backfill
    launched from the UI over ``micro_batches`` (both built by the backfill daemon's own
    ``build_run_requests_with_backfill_policies``, the backfill's tags on top)."""
    from dagster import AssetKey
    from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests_with_backfill_policies
    from dagster._core.definitions.events import AssetKeyPartitionKey

    job = defs.resolve_job_def("stage_e_dispatch")
    graph = defs.resolve_asset_graph()
    assets = [AssetKey("stage_c_evidence"), AssetKey("stage_d_verdicts")]
    sensor = {DISPATCH_TAG: "micro-batch", "stage_e/trigger_reason": "new-cards"}
    ids = []
    for i in range(runs):
        key = f"mb-op-{i:03d}"
        if i % 3 == 0:
            tags = {**sensor, **job.get_tags_for_partition_key(key, selected_asset_keys=None)}
        else:
            [request] = build_run_requests_with_backfill_policies(
                [AssetKeyPartitionKey(asset, key) for asset in assets], graph, instance)
            backfill = {"dagster/backfill": "sweepabc"} if i % 3 == 1 else {"dagster/backfill": "uiabcdef"}
            tags = {**request.tags, **backfill, **({DISPATCH_TAG: "micro-batch"} if i % 3 == 1 else {})}
        assert tags[PARTITION_TAG] == key  # the tag the run queue's limit on dispatch runs counts
        run = instance.create_run_for_job(job_def=job, status=DagsterRunStatus.QUEUED, remote_job_origin=ORIGIN,
                                          tags=tags)
        assert run.run_op_concurrency is not None and DISPATCH_POOL in run.run_op_concurrency.all_pools
        ids.append(run.run_id)
    return ids


def pool_runs_going(instance: DagsterInstance) -> list[DagsterRun]:
    """Runs holding a place in the dispatch pool: every run of the two assets, the UI's backfill's too."""
    return [run for run in internals.runs(instance, RunsFilter(statuses=internals.ACTIVE_RUN_STATUSES))
            if run.run_op_concurrency and DISPATCH_POOL in run.run_op_concurrency.all_pools]


def test_the_pool_row_deleted_before_every_pass_of_a_22_batch_sweep_never_lets_more_than_the_cap_go(
    queued: Pipeline,
) -> None:
    """Issue 40 part 3's must-show: 22 dispatch runs queued (sensor, sweep and UI backfill runs), the cap's
    worth going, and an operator deleting the pool's limit row in the UI before every pass of Dagster's run
    queue, runs ending between passes and a dispatch tick every third pass putting the row back: at no pass
    more dispatch runs going than the cap, the acknowledge job a person launches meanwhile starts on the
    next pass, and the whole queue still drains."""
    instance = queued.instance
    queued.tick("card_created_sensor")
    assert pool_limit(instance) == CAP
    ids = _dispatch_queue(instance, 22)
    assert dequeue_pass(instance) == CAP
    ack_origin = RemoteJobOrigin(ORIGIN.repository_origin, "acknowledge_trip")
    peaks = []
    for turn in range(60):
        if turn == 4:
            ack = instance.add_run(DagsterRun(job_name="acknowledge_trip", run_id=str(uuid.uuid4()),
                                              status=DagsterRunStatus.QUEUED, remote_job_origin=ack_origin))
        internals.delete_pool_limit(instance, DISPATCH_POOL)  # what the UI's "delete" does
        dequeue_pass(instance)
        if turn == 4:
            assert instance.get_run_by_id(ack.run_id).status == DagsterRunStatus.STARTING, "the ack job waited"
        peaks.append(len(pool_runs_going(instance)))
        oldest = min(pool_runs_going(instance), key=lambda run: ids.index(run.run_id), default=None)
        if oldest is not None:  # one run ends before the next pass
            instance.report_dagster_event(
                DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=oldest.job_name),
                oldest.run_id)
        if turn % 3 == 2:
            queued.tick("card_created_sensor")
        if not internals.runs(instance, RunsFilter(run_ids=ids, statuses=internals.NOT_FINISHED_STATUSES)):
            break
    assert max(peaks) <= CAP, f"{max(peaks)} dispatch runs going at once for a cap of {CAP}: {peaks}"
    assert {instance.get_run_by_id(run_id).status for run_id in ids} == {DagsterRunStatus.SUCCESS}


def test_the_runs_the_tag_limit_counts_are_the_runs_of_the_dispatch_pool() -> None:
    """The limit on ``dagster/partition`` caps dispatch runs only while the partitioned assets are exactly the
    pool's: a partitioned asset outside the pool would share the cap, one inside it unpartitioned escape it."""
    assets = list(defs.resolve_asset_graph().assets_defs)
    partitioned = {key for a in assets if a.partitions_def is not None for key in a.keys}
    pooled = {key for a in assets if a.is_executable and DISPATCH_POOL in {a.op.pool} for key in a.keys}
    assert partitioned == pooled and len(pooled) == 2


def test_this_project_never_deletes_the_pool_limit() -> None:
    """Only the adapter names the delete (an operator's action a test plays); no project code calls it."""
    from pathlib import Path

    package = Path(internals.__file__).resolve().parents[1]
    callers = [str(p.relative_to(package)) for p in package.rglob("*.py")
               if "delete_pool_limit" in p.read_text(encoding="utf-8") and p.name != "dagster_internals.py"]
    assert callers == []


# --- part 8: the smaller ones ------------------------------------------------------------------------

def test_a_release_waits_while_any_trip_is_open_not_only_the_one_the_hold_recorded(pipeline: Pipeline) -> None:
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == CAP
    with session_scope(pipeline.engine) as session:
        first = open_trip(session, "manual", {"note": "first"}).trip_id
    with session_scope(pipeline.engine) as session:
        second = open_trip(session, "manual", {"note": "second"}).trip_id
    pipeline.tick("card_created_sensor")  # holds, recording one of the two trips
    with session_scope(pipeline.engine) as session:
        recorded = session.get(PoolControl, DISPATCH_POOL).trip_id
    assert recorded in (first, second) and pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, recorded, note="this one fixed", by="ops")
    assert not release_hold(pipeline.instance, pipeline.engine, cap=CAP), "released with a trip still open"
    assert pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, second if recorded == first else first, note="both fixed", by="ops")
    assert release_hold(pipeline.instance, pipeline.engine, cap=CAP)
    assert pool_limit(pipeline.instance) == CAP


def test_the_dispatch_cap_stops_at_the_most_slots_dagster_allows_a_pool() -> None:
    from dagster._utils.concurrency import get_max_concurrency_limit_value

    from stage_e_dagster.settings import SettingsError, load_settings

    most = get_max_concurrency_limit_value()
    assert load_settings({"STAGE_E_MAX_CONCURRENT_DISPATCHES": str(most)}).max_concurrent_dispatches == most
    with pytest.raises(SettingsError) as refused:
        load_settings({"STAGE_E_MAX_CONCURRENT_DISPATCHES": str(most + 1)})
    assert "STAGE_E_MAX_CONCURRENT_DISPATCHES" in str(refused.value)


def test_the_dispatch_cap_leaves_the_run_queue_room_for_the_acknowledge_job(queued: Pipeline) -> None:
    from stage_e_dagster.defs.run_queue import dispatch_cap, dispatch_run_limit

    backstop = internals.run_queue_limit(queued.instance)
    assert dispatch_run_limit(queued.instance) == backstop - 1 == CAP
    assert dispatch_cap(queued.instance, 16) == backstop - 1 and dispatch_cap(queued.instance, 1) == 1


def test_the_dispatch_run_limit_is_read_as_dagsters_tag_counter_reads_it() -> None:
    """Key-wide entries only: a limit on one value, or one per unique value, is not a cap on all dispatch runs."""
    def limit(*entries: dict) -> int | None:
        with instance_for_test(overrides={"concurrency": {"runs": {"tag_concurrency_limits": list(entries)}}}) as inst:
            return internals.run_tag_limit(inst, PARTITION_TAG)

    assert limit() is None
    assert limit({"key": PARTITION_TAG, "value": "mb-1", "limit": 1}) is None
    assert limit({"key": PARTITION_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}) is None
    assert limit({"key": PARTITION_TAG, "limit": 4}, {"key": "other", "limit": 1}) == 4
    assert limit({"key": PARTITION_TAG, "value": {"applyLimitPerUniqueValue": False}, "limit": 3}) == 3
