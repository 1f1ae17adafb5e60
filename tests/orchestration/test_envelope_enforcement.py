"""The envelope enforced by the sensors: every bar, the hold on queued runs, and the release after ack."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import AssetKey, DagsterRun, DagsterRunStatus, SensorResult

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import CardClaim, EnvelopeTrip, MicroBatch, ScanLog
from stage_e_dagster.defs.run_ends import settle_run_end
from stage_e_dagster.defs.run_queue import pool_limit
from stage_e_dagster.defs.tags import DISPATCH_TAG, PARTITION_TAG
from stage_e_dagster.dispatch.batches import PARKED_KEY, take_batch
from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
from stage_e_dagster.envelope.signals import current_rss_mb, peak_rss_mb
from stage_e_dagster.envelope.trips import acknowledge_trip, current_open_trip, open_trip
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline
from .test_streaming import skip_text


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def open_trips(pipeline: Pipeline) -> list[tuple[str, str | None]]:
    with session_scope(pipeline.engine) as session:
        return [(t.bar, t.run_id) for t in session.execute(sa.select(EnvelopeTrip).order_by(EnvelopeTrip.id)).scalars()]


def test_requests_carry_trigger_attempt_and_max_runtime_tags_and_respect_free_slots(
    pipeline: Pipeline, monkeypatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "2")
    result = pipeline.tick("card_created_sensor")
    assert isinstance(result, SensorResult) and len(result.run_requests) == 2  # the cap is 2
    for request in result.run_requests:
        assert request.run_key == request.partition_key
        assert request.tags["stage_e/trigger_reason"] == "card-created"
        assert request.tags["stage_e/attempt"] == "1"
        assert request.tags["dagster/max_runtime"] == "1800"
    assert pool_limit(pipeline.instance) == 2


def test_failure_rate_over_the_bar_trips_and_every_dispatch_sensor_skips(pipeline: Pipeline) -> None:
    with session_scope(pipeline.engine) as session:
        for _ in range(5):
            record_fetch_outcome(session, "failed", status_code=404)
    assert "envelope within bars" in skip_text(pipeline.tick("envelope_trip_sensor"))
    with session_scope(pipeline.engine) as session:
        record_fetch_outcome(session, "failed", status_code=404)  # the sixth in the window
    pipeline.tick("envelope_trip_sensor")
    assert open_trips(pipeline) == [("fetch_failure_rate", None)]
    for name in ("card_created_sensor", "evidence_changed_sensor"):
        assert "fetch_failure_rate" in skip_text(pipeline.tick(name))


def test_a_run_whose_peak_rss_crosses_the_bar_opens_one_trip(pipeline: Pipeline, monkeypatch) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    # In process, the "worker" is this test process: raise its high-water mark 300 MB above its
    # present size, then set the bar between the two, so the start-of-run sample passes and the
    # end-of-run peak crosses.
    ballast = bytearray(300 * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])
    del ballast
    now, peak = current_rss_mb(), peak_rss_mb()
    assert peak - now > 200
    monkeypatch.setenv("STAGE_E_RSS_MB_CEILING", str(round(now + 100)))
    outcome = pipeline.run(request.partition_key, tags=dict(request.tags))
    assert outcome.success
    assert open_trips(pipeline) == [("rss", outcome.run_id)]
    pipeline.tick("envelope_trip_sensor")  # sees the run end; the run already opened the trip
    assert open_trips(pipeline) == [("rss", outcome.run_id)]


def test_an_open_trip_holds_the_pool_and_ack_restores_it(pipeline: Pipeline) -> None:
    # (Cancelling queued runs needs runs in a real queue: see test_daemon.py.)
    assert pipeline.tick("card_created_sensor").run_requests
    assert pool_limit(pipeline.instance) == 2
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    for _ in range(3):
        for name in ("card_created_sensor", "evidence_changed_sensor"):
            assert trip_id in skip_text(pipeline.tick(name))
        assert pool_limit(pipeline.instance) == 0
    pipeline.tick("envelope_trip_sensor")
    assert pool_limit(pipeline.instance) == 0
    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="maintenance done", by="ops")
    pipeline.tick("card_created_sensor")
    assert pool_limit(pipeline.instance) == 2
    with session_scope(pipeline.engine) as session:
        assert current_open_trip(session) is None


def test_a_failed_run_gets_a_ledger_entry_and_a_retry_under_a_new_key(pipeline: Pipeline, monkeypatch) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    outcome = pipeline.run_failing_in_stage_c(request.partition_key, dict(request.tags), monkeypatch)
    assert not outcome.success
    result = pipeline.tick("envelope_trip_sensor")
    [event] = [e for e in result.asset_events if e.asset_key == AssetKey("stage_c_evidence")]
    meta = {k: v.value for k, v in event.metadata.items()}
    assert "RuntimeError: stage C broke" in meta["failure_reason"]
    assert meta["run_id"] == outcome.run_id and meta["attempt"] == 1
    assert meta["retry_batch_key"] == request.partition_key + "-r2"
    retry = pipeline.tick("card_created_sensor")
    keys = [r.partition_key for r in retry.run_requests]
    assert request.partition_key + "-r2" in keys
    r2 = next(r for r in retry.run_requests if r.partition_key == request.partition_key + "-r2")
    assert r2.tags["stage_e/attempt"] == "2" and r2.run_key == request.partition_key + "-r2"
    assert pipeline.run(r2.partition_key, tags=dict(r2.tags)).success


def _age(pipeline: Pipeline, key: str, **ago: timedelta) -> None:
    """As if time had passed: move the batch's own timestamps back (no sleeping in tests)."""
    with session_scope(pipeline.engine) as session:
        batch = session.get(MicroBatch, key)
        for name, delta in ago.items():
            setattr(batch, name, getattr(batch, name) - delta)


def test_a_batch_that_waited_past_its_lease_is_requested_again_without_spending_an_attempt(
    pipeline: Pipeline,
) -> None:
    first = pipeline.tick("card_created_sensor").run_requests
    # The tick recorded the batches, but no run ever took them: the daemon died after the tick, or a
    # 45-minute trip and a full pool kept them waiting. Waiting is not failing.
    assert "no unclaimed cards" in (pipeline.tick("card_created_sensor").skip_reason.skip_message or "")
    for request in first:
        _age(pipeline, request.partition_key, created_at=timedelta(hours=2), requested_at=timedelta(minutes=45),
             lease_expires_at=timedelta(minutes=45))
    again = pipeline.tick("card_created_sensor").run_requests
    assert sorted(r.partition_key for r in again) == sorted(r.partition_key for r in first)
    assert sorted(r.run_key for r in again) == sorted(r.run_key + "@2" for r in first)  # a run key is never reused
    assert all(r.tags["stage_e/attempt"] == "1" for r in again)
    with session_scope(pipeline.engine) as session:
        for request in first:
            batch = session.get(MicroBatch, request.partition_key)
            assert batch.status == "pending" and batch.failure_reason is None and batch.attempt == 1
        assert session.execute(sa.select(sa.func.count()).select_from(ScanLog)).scalar_one() == 0
    for request in again:
        assert pipeline.run(request.partition_key, tags=dict(request.tags)).success


def test_a_running_batch_whose_run_vanished_past_its_lease_fails_and_retries(pipeline: Pipeline) -> None:
    request = pipeline.tick("card_created_sensor").run_requests[0]
    with session_scope(pipeline.engine) as session:  # a run took it, then vanished without a trace
        assert take_batch(session, request.partition_key, run_id="vanished-run", now=utcnow(),
                          lease_until=utcnow() - timedelta(seconds=1))
        cards = list(session.get(MicroBatch, request.partition_key).card_ids)
    retry = pipeline.tick("card_created_sensor")
    with session_scope(pipeline.engine) as session:
        lost = session.get(MicroBatch, request.partition_key)
        assert lost.status == "failed" and lost.failure_reason.startswith("lease expired")
        r2 = session.get(MicroBatch, request.partition_key + "-r2")
        assert r2 is not None and r2.card_ids == cards and r2.attempt == 2
    assert request.partition_key + "-r2" in [r.partition_key for r in retry.run_requests]


def _run_holding(pipeline: Pipeline, batch_key: str) -> DagsterRun:
    """A started run of the batch that took it, as a run worker would have."""
    run = DagsterRun(job_name="stage_e_dispatch", run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED,
                     tags={PARTITION_TAG: batch_key, DISPATCH_TAG: "micro-batch"})
    pipeline.instance.add_run(run)
    with session_scope(pipeline.engine) as session:
        assert take_batch(session, batch_key, run_id=run.run_id, now=utcnow(),
                          lease_until=utcnow() + timedelta(hours=1))
    return run


def test_a_tick_renews_a_running_batch_only_once_half_its_lease_is_gone(pipeline: Pipeline) -> None:
    """Every tick used to rewrite every claim of a batch in flight (500 rows a batch per pass in a
    drain) and cut a run's lease, taken for its whole maximum runtime, down to the claim TTL."""
    key = pipeline.tick("card_created_sensor").run_requests[0].partition_key
    _run_holding(pipeline, key)  # lease and claims for an hour, more than twice the claim TTL

    def lease_and_claims() -> tuple[object, list[object]]:
        with session_scope(pipeline.engine) as session:
            batch = session.get(MicroBatch, key)
            claims = session.execute(sa.select(CardClaim.expires_at).where(CardClaim.batch_key == key)).scalars()
            return batch.lease_expires_at, sorted(claims)

    taken = lease_and_claims()
    pipeline.tick("card_created_sensor")
    assert lease_and_claims() == taken  # more than half left: nothing written

    ttl = load_settings().claim_ttl_s
    with session_scope(pipeline.engine) as session:  # the hour has run down to under half the TTL
        soon = utcnow() + timedelta(seconds=ttl / 2 - 60)
        session.get(MicroBatch, key).lease_expires_at = soon
        session.execute(sa.update(CardClaim).where(CardClaim.batch_key == key).values(expires_at=soon))
    pipeline.tick("card_created_sensor")
    lease, claims = lease_and_claims()
    fresh = utcnow() + timedelta(seconds=ttl)
    assert abs((lease - fresh).total_seconds()) < 60
    assert len(claims) == len(taken[1]) and all(abs((c - fresh).total_seconds()) < 60 for c in claims)


def test_a_run_cancelled_for_its_max_runtime_spends_an_attempt_and_a_hanging_card_is_parked(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the run monitor does to a run past ``dagster/max_runtime``: CANCELING with its message,
    then CANCELED. A cancel by a person costs nothing; this one must, or a card that hangs Stage C
    is dispatched again for ever."""
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MAX_BATCH_ATTEMPTS", "2")
    settings = load_settings()
    key = pipeline.tick("card_created_sensor").run_requests[0].partition_key
    for attempt in (1, 2):
        run = _run_holding(pipeline, key)
        pipeline.instance.report_run_canceling(
            run, message="Canceling due to exceeding maximum runtime of 1800 seconds."  # the run monitor's words
        )
        pipeline.instance.report_run_canceled(run)
        end = settle_run_end(pipeline.engine, pipeline.instance, settings, pipeline.instance.get_run_by_id(run.run_id))
        with session_scope(pipeline.engine) as session:
            batch = session.get(MicroBatch, key)
            assert (batch.status, batch.attempt) == ("failed", attempt), batch.failure_reason
            assert "maximum runtime" in (batch.failure_reason or "")
            cards = list(batch.card_ids)
        if attempt == 1:
            assert end.retry_key == key + "-r2"
            key = end.retry_key
    with session_scope(pipeline.engine) as session:
        parked = session.execute(sa.select(CardClaim.card_id).where(CardClaim.batch_key == PARKED_KEY)).scalars()
        assert sorted(parked) == sorted(cards)


def test_a_run_a_person_cancelled_costs_no_attempt(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    key = pipeline.tick("card_created_sensor").run_requests[0].partition_key
    run = _run_holding(pipeline, key)
    pipeline.instance.report_run_canceling(run)
    pipeline.instance.report_run_canceled(run)
    settle_run_end(pipeline.engine, pipeline.instance, load_settings(), pipeline.instance.get_run_by_id(run.run_id))
    with session_scope(pipeline.engine) as session:
        assert session.get(MicroBatch, key).status == "abandoned"


def _queued_dispatch_run(pipeline: Pipeline, batch_key: str) -> DagsterRun:
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

    repository = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("stage_e"), "__repository__")
    run = DagsterRun(job_name="stage_e_dispatch", run_id=str(uuid.uuid4()), status=DagsterRunStatus.QUEUED,
                     remote_job_origin=RemoteJobOrigin(repository, "stage_e_dispatch"),
                     tags={PARTITION_TAG: batch_key, DISPATCH_TAG: "micro-batch"})
    pipeline.instance.add_run(run)
    return run


def test_the_envelope_sensor_leaves_a_cancelled_runs_batch_alone_while_another_run_of_it_is_queued(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch requested again has two runs; a person cancels the first while the second waits queued.
    The batch stays the queued run's to take (the dispatch sensor settles only with no run going); the
    envelope sensor abandoned it, so the queued run would start on a batch already given back."""
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    key = pipeline.tick("card_created_sensor").run_requests[0].partition_key
    first, second = _queued_dispatch_run(pipeline, key), _queued_dispatch_run(pipeline, key)
    pipeline.instance.report_run_canceling(first)
    pipeline.instance.report_run_canceled(pipeline.instance.get_run_by_id(first.run_id))
    pipeline.tick("envelope_trip_sensor")
    with session_scope(pipeline.engine) as session:
        batch = session.get(MicroBatch, key)
        assert batch.status == "pending", batch.failure_reason
        assert session.execute(sa.select(sa.func.count()).select_from(CardClaim)
                               .where(CardClaim.batch_key == key)).scalar_one() == len(batch.card_ids)

    # The queued run ends too (cancelled): with no run of the batch going, its batch is settled.
    pipeline.instance.report_run_canceled(pipeline.instance.get_run_by_id(second.run_id))
    pipeline.tick("envelope_trip_sensor")
    with session_scope(pipeline.engine) as session:
        assert session.get(MicroBatch, key).status == "abandoned"
