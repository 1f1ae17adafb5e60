"""Honest run pages: what a run's own log says while it works, a refusal in one line, and no partition
left failed for a batch whose cards were put back. Real runs on a real instance, a real HTTP image host."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import AssetKey, AssetPartitionStatus, DagsterEventType

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, CardClaim, MicroBatch
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.ledger import cards_per_hour, ledger_entries
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.envelope.trips import acknowledge_trip, open_trip

from .conftest import ImageServer, Pipeline
from .test_dispatch_invariants import batch, requests_of, serve_over_http

STAGE_C = AssetKey("stage_c_evidence")


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


def run_messages(pipeline: Pipeline, run_id: str) -> list[str]:
    """What the run's code logged through ``context.log``, as the run page shows it."""
    return [entry.user_message for entry in pipeline.instance.all_logs(run_id) if entry.dagster_event is None]


def event_types(pipeline: Pipeline, run_id: str) -> set[DagsterEventType]:
    return {entry.dagster_event.event_type for entry in pipeline.instance.all_logs(run_id) if entry.dagster_event}


def partition_status(pipeline: Pipeline) -> dict[str, AssetPartitionStatus | None]:
    keys = pipeline.instance.get_dynamic_partitions(micro_batches.name)
    return pipeline.instance.get_status_by_partition(STAGE_C, keys, micro_batches) or {}


def test_a_run_logs_its_progress_and_every_card_that_did_not_simply_complete(
    pipeline: Pipeline, image_server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "8")
    monkeypatch.setenv("STAGE_E_MAX_CONCURRENT_DISPATCHES", "1")  # one batch, all 8 cards in it
    images = dict(serve_over_http(pipeline, image_server))
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    throttled, failing, missing, *_ = batch(pipeline, request.partition_key).card_ids
    image_server.status.update({images[throttled]: 429, images[failing]: 500, images[missing]: 404})

    result = pipeline.run(request.partition_key, tags=dict(request.tags))
    assert result.success
    said = run_messages(pipeline, result.run_id)
    # One line per card that did not complete, naming its outcome and what became of it.
    assert f"stage C: card {throttled} throttled: HTTP 429 from 127.0.0.1: deferred, stays in the backlog" in said
    assert f"stage C: card {failing} failed: server-error (HTTP 500): stays in the backlog for another attempt" in said
    assert f"stage C: card {missing} failed: not-found (HTTP 404): terminal record written" in said
    # Progress every quarter of the batch, with the tally so far; Stage D likewise.
    progress = [line for line in said if line.startswith("stage C: ") and " of 8 cards" in line]
    assert progress[0].startswith("stage C: 2 of 8 cards (")
    assert progress[-1] == "stage C: 8 of 8 cards (2 failed, 1 throttled)"
    assert len(progress) == 4
    stage_d = [line for line in said if line.startswith("stage D: ")]
    assert len(stage_d) >= 2 and stage_d[-1].endswith(" cards")
    with session_scope(pipeline.engine) as session:
        pending = dict(session.execute(sa.select(Card.id, Card.stage_c_pending)
                                       .where(Card.id.in_([throttled, failing, missing]))).all())
    assert pending == {throttled: True, failing: True, missing: False}  # the log says what the catalogue holds


def test_a_refused_run_says_so_in_one_line_without_a_traceback_and_its_cards_come_back(pipeline: Pipeline) -> None:
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    result = pipeline.run(request.partition_key, tags=dict(request.tags))

    [refusal] = [line for line in run_messages(pipeline, result.run_id) if "refused" in line]
    assert refusal.startswith("dispatch refused, no work done: ") and trip_id in refusal
    kinds = event_types(pipeline, result.run_id)
    assert result.success and DagsterEventType.STEP_FAILURE not in kinds and DagsterEventType.RUN_FAILURE not in kinds
    assert DagsterEventType.STEP_SKIPPED in kinds  # Stage D did not run
    assert DagsterEventType.ASSET_MATERIALIZATION not in kinds
    assert not any("Traceback" in (line or "") for line in run_messages(pipeline, result.run_id))
    run = pipeline.instance.get_run_by_id(result.run_id)
    assert run.tags["stage_e/refused"] == "gate"

    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="maintenance over", by="ops")
    pipeline.tick("envelope_trip_sensor")  # the run ended: its batch is abandoned and its cards released
    gone = batch(pipeline, request.partition_key)
    assert gone.status == "abandoned" and gone.failure_reason.startswith("refused: ")
    with session_scope(pipeline.engine) as session:
        held = session.execute(sa.select(sa.func.count()).select_from(CardClaim)
                               .where(CardClaim.batch_key == request.partition_key)).scalar_one()
    assert held == 0
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        waiting = session.execute(sa.select(sa.func.count()).select_from(Card).where(Card.stage_c_pending))
        assert waiting.scalar_one() == 0


def ended_run(pipeline: Pipeline, partition_key: str, tags: dict[str, str], *, failed: bool) -> str:
    """A dispatch run of the batch that ended without running a step: cancelled while queued (the hold,
    or a person), or failed with the refusal tags, as a refused run ended before refusals succeeded."""
    job = defs.resolve_job_def("stage_e_dispatch")
    run = pipeline.instance.create_run_for_job(job, tags={**tags, "dagster/partition": partition_key})
    if failed:
        pipeline.instance.add_run_tags(run.run_id, {"stage_e/refused": "gate", "stage_e/refused_reason": "a trip"})
        pipeline.instance.report_run_failed(run)
    else:
        pipeline.instance.report_run_canceled(run)
    return run.run_id


@pytest.mark.parametrize("failed", [True, False], ids=["refused-and-failed", "cancelled"])
def test_an_abandoned_batch_loses_its_partition_once_its_run_has_ended(pipeline: Pipeline, failed: bool) -> None:
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    key = request.partition_key
    ended_run(pipeline, key, dict(request.tags), failed=failed)
    if failed:
        assert partition_status(pipeline).get(key) == AssetPartitionStatus.FAILED  # red in the asset view

    pipeline.tick("envelope_trip_sensor")  # settles the run: the batch is abandoned, its cards released
    assert batch(pipeline, key).status == "abandoned"
    pipeline.tick("retention_sensor")  # within a minute of the abandonment: left for a later tick
    assert key in pipeline.instance.get_dynamic_partitions(micro_batches.name)

    with pipeline.engine.begin() as conn:  # two minutes later
        conn.execute(sa.update(MicroBatch).where(MicroBatch.batch_key == key)
                     .values(finished_at=utcnow() - timedelta(minutes=2)))
    pipeline.tick("retention_sensor")
    assert key not in pipeline.instance.get_dynamic_partitions(micro_batches.name)
    pipeline.drain()  # its cards are processed under other batches' keys, which show materialized
    statuses = partition_status(pipeline)
    assert statuses and set(statuses.values()) == {AssetPartitionStatus.MATERIALIZED}
    assert batch(pipeline, key).status == "abandoned"  # the row stays until retention takes it
    assert pipeline.tick("retention_sensor").dynamic_partitions_requests == []  # once only


def test_an_abandoned_batch_with_a_run_still_waiting_keeps_its_partition(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "4")
    [first, second, *_] = requests_of(pipeline.tick("card_created_sensor"))
    with session_scope(pipeline.engine) as session:
        for key in (first.partition_key, second.partition_key):
            session.execute(sa.update(MicroBatch).where(MicroBatch.batch_key == key)
                            .values(status="abandoned", finished_at=utcnow() - timedelta(minutes=2)))
    job = defs.resolve_job_def("stage_e_dispatch")
    waiting = pipeline.instance.create_run_for_job(job, tags={**first.tags, "dagster/partition": first.partition_key})
    pipeline.tick("retention_sensor")
    kept = pipeline.instance.get_dynamic_partitions(micro_batches.name)
    # The batch whose run still waits keeps its partition; the one after it does not wait on it.
    assert first.partition_key in kept and second.partition_key not in kept
    pipeline.instance.report_run_canceled(waiting)
    pipeline.tick("retention_sensor")
    kept = pipeline.instance.get_dynamic_partitions(micro_batches.name)
    assert first.partition_key not in kept and second.partition_key not in kept


def test_a_backfill_run_a_trip_refuses_materializes_its_partition_as_stopped_with_nothing_done(
    pipeline: Pipeline,
) -> None:
    """A sweep's run dequeued between a trip opening and the hold refuses at the gate. Dagster's asset
    backfill counts a partition as done only when a run tagged with the backfill materializes it; one no
    run of the backfill materialized ends it COMPLETED_FAILED though every run succeeded. So the refusing
    run materializes both assets with a ledger row that says the trip stopped it at 0 cards, and the
    batch's cards go back to the backlog as for any refusal."""
    [request, *_] = requests_of(pipeline.tick("card_created_sensor"))
    held = batch(pipeline, request.partition_key)
    with session_scope(pipeline.engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    result = pipeline.run(request.partition_key, tags={**dict(request.tags), "dagster/backfill": "sweep1"})
    assert result.success
    run = pipeline.instance.get_run_by_id(result.run_id)
    assert run.tags["stage_e/refused"] == "gate"

    # What Dagster's backfill counts as materialized: each target asset's partition, by a run of the backfill.
    for key in (STAGE_C, AssetKey("stage_d_verdicts")):
        records = pipeline.instance.fetch_materializations(key, limit=10).records
        done = [(r.run_id, r.asset_materialization.partition) for r in records]
        assert done == [(result.run_id, request.partition_key)], f"no run of the backfill materialized {key}"
        [record] = records
        row = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        assert (row["cards_done"], row["stopped_early"], row["stopped_by_trip"]) == (0, 1, trip_id)
        assert row["card_count"] == len(held.card_ids)
    assert not any("Traceback" in (line or "") for line in run_messages(pipeline, result.run_id))

    pipeline.tick("envelope_trip_sensor")  # settles the run end: the batch is put back at no cost
    gone = batch(pipeline, request.partition_key)
    assert gone.status == "abandoned" and gone.failure_reason.startswith("refused: ")
    assert gone.attempt == held.attempt
    with session_scope(pipeline.engine) as session:
        claims = session.execute(sa.select(sa.func.count()).select_from(CardClaim)
                                 .where(CardClaim.batch_key == request.partition_key)).scalar_one()
        evidenced = session.execute(sa.select(sa.func.count()).select_from(Card)
                                    .where(Card.id.in_(held.card_ids), sa.not_(Card.stage_c_pending))).scalar_one()
    assert (claims, evidenced) == (0, 0)  # no card touched, none lost
    [entry] = [e for e in ledger_entries(pipeline.instance) if e.run_id == result.run_id]
    assert (entry.status, entry.fields["cards_done"], entry.fields["stopped_by_trip"]) == ("stopped", 0, trip_id)
    assert cards_per_hour([entry]) in (None, 0.0)

    with session_scope(pipeline.engine) as session:
        acknowledge_trip(session, trip_id, note="maintenance over", by="ops")
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        waiting = session.execute(sa.select(sa.func.count()).select_from(Card).where(Card.stage_c_pending))
        assert waiting.scalar_one() == 0
