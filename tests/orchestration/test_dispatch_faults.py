"""Dispatch under faults (issue 19, part A): a run that lost its batch stops, a failure report for a live
worker fails nothing, the run-end reader always moves on, the hold never strands the pool, and a run end
is recorded once whatever happens to the tick. Real sensor ticks and runs on a real instance and catalogue.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import AssetKey, DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._daemon.types import DaemonHeartbeat
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.heartbeats import DAEMON_TICKER, record_heartbeat
from stage_e_dagster.catalog.models import ImageEvidence, MicroBatch, PoolControl, SensorTicker, StageDPass
from stage_e_dagster.cli.main import app
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.envelope_asset import read_envelope
from stage_e_dagster.defs.hold import hold_dispatch, release_hold
from stage_e_dagster.defs.ledger import ledger_entries
from stage_e_dagster.defs.resources import StageEResource
from stage_e_dagster.defs.run_queue import active_dispatch_runs, pool_limit
from stage_e_dagster.defs.tags import DISPATCH_POOL, DISPATCH_TAG, PARTITION_TAG
from stage_e_dagster.dispatch.batches import fail_and_retry, get_batch, take_batch
from stage_e_dagster.envelope.trips import acknowledge_trip, open_trip
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def _dispatch_run(instance: DagsterInstance, key: str, run_id: str | None = None) -> DagsterRun:
    """A dispatch run record of batch ``key`` in the instance, as the queue would have created it."""
    run = DagsterRun(job_name="stage_e_dispatch", run_id=run_id or str(uuid.uuid4()),
                     tags={DISPATCH_TAG: "micro-batch", PARTITION_TAG: key})
    return instance.add_run(run)


def _taken(pipeline: Pipeline, key: str, run_id: str) -> None:
    with session_scope(pipeline.engine) as session:
        assert take_batch(session, key, run_id=run_id, now=utcnow(), lease_until=utcnow() + timedelta(minutes=30))


def _stage_c_entries(result) -> list[dict]:  # type: ignore[no-untyped-def]
    return [{k: v.value for k, v in e.metadata.items()} for e in (result.asset_events or [])
            if e.asset_key == AssetKey("stage_c_evidence")]


# --- item 1: one run launched twice -------------------------------------------------------------

class StealingFetcher:
    """The real fetcher, except that its first fetch is when another evaluator fails the batch and
    retries it (what the run-end handling did to a live run reported as dead)."""

    def __init__(self, inner, engine: sa.Engine, key: str) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.engine, self.key, self.fetches = inner, engine, key, 0
        self.settings_fingerprint = inner.settings_fingerprint  # what Stage C marks a refused card with

    def fetch(self, locator: str):  # type: ignore[no-untyped-def]
        self.fetches += 1
        if self.fetches == 1:
            with session_scope(self.engine) as session:
                batch = get_batch(session, self.key)
                assert fail_and_retry(session, batch, reason="run worker died (signal or OOM): exited 0",
                                      now=utcnow(), max_attempts=3, claim_ttl_s=600, run_id=batch.run_id).recorded
        return self.inner.fetch(locator)

    def close(self) -> None:
        self.inner.close()


def test_a_run_that_no_longer_holds_its_batch_stops_at_the_next_card_and_skips_stage_d(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "6")
    request = pipeline.tick("card_created_sensor").run_requests[0]
    fetchers: list[StealingFetcher] = []
    real = StageEResource.image_fetcher

    def stealing(self, settings):  # type: ignore[no-untyped-def]
        fetchers.append(StealingFetcher(real(self, settings), pipeline.engine, request.partition_key))
        return fetchers[-1]

    monkeypatch.setattr(StageEResource, "image_fetcher", stealing)
    outcome = pipeline.run(request.partition_key, tags=dict(request.tags))
    assert outcome.success
    with session_scope(pipeline.engine) as session:
        evidence = session.execute(sa.select(sa.func.count()).select_from(ImageEvidence)
                                   .where(ImageEvidence.run_id == outcome.run_id)).scalar_one()
        passes = session.execute(sa.select(sa.func.count()).select_from(StageDPass)
                                 .where(StageDPass.run_id == outcome.run_id)).scalar_one()
        retry = session.get(MicroBatch, request.partition_key + "-r2")
    assert retry is not None and retry.status == "pending"
    # At most the card already under way when the batch was taken away; the fetches ahead are bounded.
    assert evidence <= 1, f"the run went on with {evidence} cards of a batch it no longer held"
    assert fetchers[0].fetches <= 3
    assert passes == 0, f"Stage D ran over {passes} cards of a batch its run no longer held"


def test_stage_d_stops_between_chunks_once_its_batch_was_taken_and_its_ledger_row_says_lost(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 4: another evaluator fails and retries the batch while Stage D runs. Stage D stops at
    the next chunk instead of voting beside the retry, and the run's ledger entry is ``lost``."""
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "8")
    request = pipeline.tick("card_created_sensor").run_requests[0]
    key = request.partition_key
    import stage_e_dagster.stage_d.run as stage_d_run

    real_chunk = stage_d_run._run_chunk
    chunks: list[list[int]] = []

    def chunk_then_steal(engine, ids, run_id, index):  # type: ignore[no-untyped-def]
        report = real_chunk(engine, ids, run_id, index)
        chunks.append(list(ids))
        if len(chunks) == 1:
            with session_scope(pipeline.engine) as session:
                batch = get_batch(session, key)
                assert fail_and_retry(session, batch, reason="run worker died (signal or OOM): exited 0",
                                      now=utcnow(), max_attempts=3, claim_ttl_s=600, run_id=batch.run_id).recorded
        return report

    monkeypatch.setattr(stage_d_run, "_run_chunk", chunk_then_steal)
    outcome = pipeline.run(key, tags=dict(request.tags))
    assert outcome.success
    with session_scope(pipeline.engine) as session:
        voted = set(session.execute(sa.select(StageDPass.card_id).where(StageDPass.run_id == outcome.run_id)).scalars())
    assert len(chunks) == 1 and voted <= set(chunks[0]), (
        f"Stage D went on over {len(chunks)} chunks ({sorted(voted)}) of a batch its run no longer held"
    )
    entries = [e for e in ledger_entries(pipeline.instance) if e.run_id == outcome.run_id]
    assert [e.status for e in entries] == ["lost"]
    assert entries[0].fields["batch_lost"] == 1


def test_stage_d_re_executed_alone_refuses_a_batch_another_run_holds(pipeline: Pipeline) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    key = request.partition_key
    assert pipeline.run(key, tags=dict(request.tags)).success
    with pipeline.engine.begin() as conn:  # the batch's cards wait for Stage D again, under another run
        conn.execute(sa.text("UPDATE micro_batches SET status = 'running', run_id = 'other-run' WHERE batch_key = :k"),
                     {"k": key})
        conn.execute(sa.text("UPDATE cards SET stage_d_pending = true"))
        conn.execute(sa.text("DELETE FROM stage_d_passes"))
    job = defs.resolve_job_def("stage_e_dispatch")
    again = job.execute_in_process(partition_key=key, instance=pipeline.instance, raise_on_error=False,
                                   asset_selection=[AssetKey("stage_d_verdicts")])
    with session_scope(pipeline.engine) as session:
        passes = session.execute(sa.select(sa.func.count()).select_from(StageDPass)
                                 .where(StageDPass.run_id == again.run_id)).scalar_one()
        assert session.get(MicroBatch, key).status == "running"
    assert passes == 0, f"a Stage D re-execution redid {passes} cards of a batch run other-run holds"


def _report_exit_zero(instance: DagsterInstance, run: DagsterRun) -> None:
    """What the code server's orphan check writes when the duplicate worker of a run exits 0."""
    instance.report_engine_event(
        f"Run execution process for {run.run_id} unexpectedly exited with code 0.", run
    )
    instance.report_run_failed(run)


def test_a_failure_report_for_a_worker_still_making_progress_fails_nothing(pipeline: Pipeline) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    key = request.partition_key
    run = _dispatch_run(pipeline.instance, key)
    _taken(pipeline, key, run.run_id)  # the live worker took the batch and works through it
    _report_exit_zero(pipeline.instance, run)
    for name in ("envelope_trip_sensor", "card_created_sensor"):
        pipeline.tick(name)
    with session_scope(pipeline.engine) as session:
        batch = session.get(MicroBatch, key)
        assert (batch.status, batch.run_id) == ("running", run.run_id), batch.failure_reason
        assert session.get(MicroBatch, key + "-r2") is None
    # Once the worker stops showing progress, the report is believed and the batch retried.
    with pipeline.engine.begin() as conn:
        conn.execute(sa.text("UPDATE micro_batches SET started_at = :t, progress_at = :t WHERE batch_key = :k"),
                     {"t": utcnow() - timedelta(minutes=10), "k": key})
    pipeline.tick("card_created_sensor")
    with session_scope(pipeline.engine) as session:
        assert session.get(MicroBatch, key).status == "failed"
        assert session.get(MicroBatch, key + "-r2") is not None


def test_two_processes_ticking_the_same_sensors_warn_in_status_and_on_the_envelope(pipeline: Pipeline) -> None:
    settings = load_settings()
    pipeline.tick("envelope_trip_sensor")  # this process ticks ...
    other = (  # ... and so does a second one, on the same catalogue, between its ticks
        "import sys; from stage_e_dagster.catalog.base import utcnow;"
        "from stage_e_dagster.catalog.engine import make_engine, session_scope;"
        "from stage_e_dagster.catalog.heartbeats import record_heartbeat;"
        "from stage_e_dagster.settings import load_settings;"
        "e = make_engine(sys.argv[1]);"
        "s = session_scope(e).__enter__();"
        "record_heartbeat(s, 'envelope_trip_sensor', interval_s=4, settings=load_settings(), "
        "pool='stage_e_dispatch', now=utcnow()); s.commit()"
    )
    subprocess.run([sys.executable, "-c", other, pipeline.url], check=True, timeout=120)
    pipeline.tick("envelope_trip_sensor")
    result = CliRunner().invoke(app, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2 processes tick envelope_trip_sensor" in result.output, result.output
    with session_scope(pipeline.engine) as session:
        reading = read_envelope(session, settings, now=utcnow(), sensor_lag_s=0.0)
    assert reading.values["sensor_processes"] == 2
    # One process alone (the other stopped long ago) reads 1 again.
    with session_scope(pipeline.engine) as session:
        record_heartbeat(session, "envelope_trip_sensor", interval_s=4, settings=settings, pool=DISPATCH_POOL,
                         now=utcnow() + timedelta(minutes=5))
        assert read_envelope(session, settings, now=utcnow() + timedelta(minutes=5),
                             sensor_lag_s=0.0).values["sensor_processes"] == 1


def _daemon_heartbeat(instance: DagsterInstance, daemon_type: str, daemon_id: str, at: float) -> None:
    instance.add_daemon_heartbeat(DaemonHeartbeat(at, daemon_type, daemon_id, errors=[]))


def test_two_daemons_warn_even_when_one_of_them_wins_every_tick(pipeline: Pipeline) -> None:
    # Two daemons on one instance: only one runs each tick (the other finds it under the minimum
    # interval), but both rewrite Dagster's heartbeat rows, so a row of each is there at a tick.
    start = time.time() - 20
    _daemon_heartbeat(pipeline.instance, "SENSOR", "daemon-a", start)
    _daemon_heartbeat(pipeline.instance, "QUEUED_RUN_COORDINATOR", "daemon-b", start + 1)
    pipeline.tick("envelope_trip_sensor")
    _daemon_heartbeat(pipeline.instance, "SENSOR", "daemon-b", start + 10)
    _daemon_heartbeat(pipeline.instance, "QUEUED_RUN_COORDINATOR", "daemon-a", start + 11)
    pipeline.tick("envelope_trip_sensor")
    result = CliRunner().invoke(app, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "warning: 2 processes tick dagster-daemon side by side (daemon daemon-a, daemon daemon-b)" in (
        result.output), result.output
    assert "one daemon per instance" in result.output, result.output
    with session_scope(pipeline.engine) as session:
        assert read_envelope(session, load_settings(), now=utcnow(), sensor_lag_s=0.0).values["sensor_processes"] == 2


def test_a_restarted_daemon_whose_old_heartbeats_linger_is_not_two_daemons(pipeline: Pipeline) -> None:
    start = time.time() - 60
    for daemon_type in ("SENSOR", "QUEUED_RUN_COORDINATOR"):
        _daemon_heartbeat(pipeline.instance, daemon_type, "before-restart", start)
    pipeline.tick("envelope_trip_sensor")
    # The restarted daemon has rewritten one row so far; the other still carries the old id.
    _daemon_heartbeat(pipeline.instance, "SENSOR", "after-restart", start + 40)
    pipeline.tick("envelope_trip_sensor")
    _daemon_heartbeat(pipeline.instance, "QUEUED_RUN_COORDINATOR", "after-restart", start + 41)
    pipeline.tick("envelope_trip_sensor")
    result = CliRunner().invoke(app, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "side by side" not in result.output, result.output
    with session_scope(pipeline.engine) as session:
        tickers = session.execute(sa.select(SensorTicker.ticked_by).where(SensorTicker.sensor_name == DAEMON_TICKER))
        assert sorted(tickers.scalars()) == ["daemon after-restart", "daemon before-restart"]


# --- item 2: the run-end reader never stalls -----------------------------------------------------

def test_the_run_end_reader_passes_any_number_of_other_jobs_run_ends(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stage_e_dagster.defs.sensors.envelope_trip as envelope_trip

    # A tick reads 5 run ends here instead of 100, so 12 runs of another job stand for 150 (the
    # slow drill in test_run_end_drills.py has the real figures and the real daemon).
    monkeypatch.setattr(envelope_trip, "RUNS_PER_TICK", 5)
    request = pipeline.tick("card_created_sensor").run_requests[0]
    pipeline.tick("envelope_trip_sensor")
    for _ in range(12):  # quick runs of another job, all ending inside one overlap window
        other = pipeline.instance.add_run(DagsterRun(job_name="stage_e_acknowledge", run_id=str(uuid.uuid4())))
        pipeline.instance.report_run_canceled(other)
    run = _dispatch_run(pipeline.instance, request.partition_key)
    pipeline.instance.report_run_canceled(run, message="cancelled by a person")
    for _ in range(4):
        pipeline.tick("envelope_trip_sensor")
    with session_scope(pipeline.engine) as session:
        batch = session.get(MicroBatch, request.partition_key)
        assert batch.status == "abandoned", "the envelope sensor never reached the dispatch run's end"


# --- item 3: the pool is never left at 0 without a trip ------------------------------------------

def test_a_failed_release_leaves_the_hold_to_be_recovered_next_tick(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="ops")
    storage = pipeline.instance.event_log_storage
    real = storage.set_concurrency_slots

    def blip(pool: str, limit: int) -> None:
        raise OperationalError("UPDATE concurrency_limits", {}, Exception("database is locked"))

    monkeypatch.setattr(storage, "set_concurrency_slots", blip)
    with pytest.raises(OperationalError):
        pipeline.tick("card_created_sensor")
    monkeypatch.setattr(storage, "set_concurrency_slots", real)
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2, "the pool was left at 0 with no trip open"


def test_a_stale_hold_beside_a_release_never_leaves_the_pool_at_0_without_a_hold(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sensors tick in threads: one tick releases after the acknowledgement while another, whose gate
    read the trip before it, holds again. The hold's pool write used to land after the release's
    restore and clear, leaving the pool at 0 with no hold row to release it (seen in a daemon drill)."""
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    pipeline.tick("card_created_sensor")
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="ops")
    storage = pipeline.instance.event_log_storage
    real = storage.set_concurrency_slots
    restored, stale_hold_done = threading.Event(), threading.Event()

    def slow_release(pool: str, limit: int) -> None:
        real(pool, limit)
        if limit > 0 and threading.current_thread().name == "release":
            restored.set()
            stale_hold_done.wait(timeout=3)  # between the restore and the clear: the stale hold's chance

    monkeypatch.setattr(storage, "set_concurrency_slots", slow_release)
    release = threading.Thread(target=release_hold, args=(pipeline.instance, pipeline.engine), kwargs={"cap": 2},
                               name="release")
    release.start()
    assert restored.wait(timeout=60)

    def stale_hold() -> None:
        hold_dispatch(pipeline.instance, pipeline.engine, trip_id=trip_id, reason="read the trip before the ack")
        stale_hold_done.set()

    hold = threading.Thread(target=stale_hold)
    hold.start()
    release.join(timeout=120)
    hold.join(timeout=120)
    with session_scope(pipeline.engine) as session:
        held = session.get(PoolControl, DISPATCH_POOL).held_at is not None
    assert pool_limit(pipeline.instance) != 0 or held, "the pool was left at 0 with no hold to release it"
    pipeline.tick("card_created_sensor")  # the next tick releases whatever the stale tick held
    assert pool_limit(pipeline.instance) == 2


def test_a_crash_between_the_pool_write_and_the_hold_commit_never_strands_the_pool(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 3: the code server dies right after it set the pool to 0. The hold row must already
    be committed, so the 0 is never recorded as the limit to give back, nor kept as an operator's."""
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    storage = pipeline.instance.event_log_storage
    real = storage.set_concurrency_slots

    def write_then_die(pool: str, limit: int) -> None:
        real(pool, limit)
        raise SystemExit("code server killed after the pool write")

    monkeypatch.setattr(storage, "set_concurrency_slots", write_then_die)
    with pytest.raises(SystemExit):
        hold_dispatch(pipeline.instance, pipeline.engine, trip_id=trip_id, reason="trip")
    monkeypatch.setattr(storage, "set_concurrency_slots", real)
    assert pool_limit(pipeline.instance) == 0
    pipeline.tick("card_created_sensor")  # the restarted code server's tick holds again
    assert pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="ops")
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2, "the ack restored this project's own 0 as the pool's limit"
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2


def test_a_canceling_dispatch_run_counts_as_active(pipeline: Pipeline) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    run = _dispatch_run(pipeline.instance, request.partition_key)
    pipeline.instance.report_run_canceling(run)
    assert pipeline.instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELING
    assert run.run_id in [r.run_id for r in active_dispatch_runs(pipeline.instance)]


# --- item 4: a run end is recorded once, whatever happens to the tick -----------------------------

def test_a_tick_that_raises_after_settling_loses_no_ledger_entry(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    pipeline.tick("envelope_trip_sensor")
    run = _dispatch_run(pipeline.instance, request.partition_key)
    _taken(pipeline, request.partition_key, run.run_id)
    pipeline.instance.report_engine_event(
        f"Run execution process for {run.run_id} was terminated by signal 9 (SIGKILL).", run
    )
    pipeline.instance.report_run_failed(run)
    import stage_e_dagster.defs.sensors.envelope_trip as envelope_trip

    def blip(session):  # type: ignore[no-untyped-def]
        raise OperationalError("SELECT envelope_trips", {}, Exception("server closed the connection"))

    monkeypatch.setattr(envelope_trip, "current_open_trip", blip)
    with pytest.raises(OperationalError):
        pipeline.tick("envelope_trip_sensor")  # settled the batch, then lost the tick
    monkeypatch.undo()
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    with session_scope(pipeline.engine) as session:
        assert session.get(MicroBatch, request.partition_key).status == "failed"
    entries = _stage_c_entries(pipeline.tick("envelope_trip_sensor"))
    assert [e["run_id"] for e in entries] == [run.run_id], "the failed run's ledger entry was lost"
    assert entries[0]["failure_reason"].startswith("run worker died")
    assert _stage_c_entries(pipeline.tick("envelope_trip_sensor")) == []  # and recorded once
