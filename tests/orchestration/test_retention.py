"""Retention on a real instance and catalogue: the sensor's bounded two-phase prune, the CLI's, and
the ledger read back complete however many records the window holds (retention keeps every event)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import AssetKey, AssetObservation, DeleteDynamicPartitionsRequest, SensorResult, build_sensor_context
from typer.testing import CliRunner

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import FetchOutcome, MicroBatch
from stage_e_dagster.cli.main import app
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs import retention as batch_retention
from stage_e_dagster.defs.ledger import ledger_entries
from stage_e_dagster.defs.resources import StageEResource
from stage_e_dagster.defs.sensors import retention as sensor_module
from stage_e_dagster.dispatch.batch_rows import STAGE_C_FIELDS, STAGE_D_FIELDS, failure_row
from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
from stage_e_dagster.settings import SettingsError, load_settings

from .conftest import Pipeline
from .test_streaming import skip_text

SENSOR = "retention_sensor"


def add_batches(pipeline: Pipeline, **batches: tuple[str, float | None]) -> None:
    """Catalogue rows and partitions: ``key=(status, finished days ago or None)``."""
    now = utcnow()
    with session_scope(pipeline.engine) as session:
        for key, (status, age_days) in batches.items():
            session.add(
                MicroBatch(
                    batch_key=key,
                    card_ids=[],
                    trigger_reason="card-created",
                    status=status,
                    created_at=now - timedelta(days=age_days or 0, hours=1),
                    finished_at=None if age_days is None else now - timedelta(days=age_days),
                )
            )
    pipeline.instance.add_dynamic_partitions("micro_batches", list(batches))


def batch_keys(pipeline: Pipeline) -> set[str]:
    with session_scope(pipeline.engine) as session:
        return set(session.execute(sa.select(MicroBatch.batch_key)).scalars())


def partition_keys(pipeline: Pipeline) -> set[str]:
    return set(pipeline.instance.get_dynamic_partitions("micro_batches"))


def deletes_requested(result: SensorResult) -> list[str]:
    return [
        key
        for request in result.dynamic_partitions_requests or []
        if isinstance(request, DeleteDynamicPartitionsRequest)
        for key in request.partition_keys
    ]


@pytest.fixture
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")


@pytest.mark.usefixtures("streaming_on")
def test_old_finished_batches_go_partition_first_and_recent_or_in_flight_ones_stay(pipeline: Pipeline) -> None:
    add_batches(
        pipeline,
        old_ok=("succeeded", 10),
        old_failed=("failed", 8),
        old_abandoned=("abandoned", 30),
        recent_ok=("succeeded", 6),
        pending=("pending", None),
        # Only a finished status makes a batch eligible, whatever its timestamps say.
        running=("running", 20),
    )
    old = {"old_ok", "old_failed", "old_abandoned"}
    first = pipeline.tick(SENSOR)
    assert sorted(deletes_requested(first)) == sorted(old)
    assert "requested deletion of 3 partition(s)" in skip_text(first)
    # The rows outlive the first tick: a partition is never left without the row that finds it.
    assert batch_keys(pipeline) == old | {"recent_ok", "pending", "running"}
    assert partition_keys(pipeline) == {"recent_ok", "pending", "running"}

    second = pipeline.tick(SENSOR)
    assert deletes_requested(second) == []
    assert "deleted 3 batch row(s)" in skip_text(second)
    assert batch_keys(pipeline) == partition_keys(pipeline) == {"recent_ok", "pending", "running"}

    third = pipeline.tick(SENSOR)
    assert deletes_requested(third) == [] and "0 batch row(s)" in skip_text(third)
    assert batch_keys(pipeline) == {"recent_ok", "pending", "running"}


@pytest.mark.usefixtures("streaming_on")
def test_a_delete_request_never_applied_is_requested_again_and_its_row_kept(pipeline: Pipeline) -> None:
    add_batches(pipeline, old=("succeeded", 9))
    sensor = defs.resolve_sensor_def(SENSOR)
    context = build_sensor_context(instance=pipeline.instance, resources={"stage_e": pipeline.resource()})
    # What the daemon receives: the delete request and the summary. Here it is never applied (the
    # daemon died after the evaluation).
    lost = sensor.evaluate_tick(context)
    assert [list(r.partition_keys) for r in lost.dynamic_partitions_requests] == [["old"]]
    assert "requested deletion of 1 partition(s)" in (lost.skip_message or "")
    assert batch_keys(pipeline) == partition_keys(pipeline) == {"old"}
    assert deletes_requested(pipeline.tick(SENSOR)) == ["old"]
    pipeline.tick(SENSOR)
    assert batch_keys(pipeline) == partition_keys(pipeline) == set()


@pytest.mark.usefixtures("streaming_on")
def test_each_tick_touches_at_most_the_bound(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sensor_module, "BATCHES_PER_TICK", 3)
    add_batches(pipeline, **{f"old-{i}": ("succeeded", 8 + i) for i in range(7)})
    ticks = 0
    while batch_keys(pipeline):
        before = batch_keys(pipeline)
        result = pipeline.tick(SENSOR)
        ticks += 1
        forgotten = before - batch_keys(pipeline)
        assert 0 < len(deletes_requested(result)) + len(forgotten) <= 3
        assert ticks < 10, "retention stopped making progress"
    assert partition_keys(pipeline) == set()


@pytest.mark.usefixtures("streaming_on")
def test_the_retention_setting_moves_the_cutoff(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_RETENTION_DAYS", "30")
    add_batches(pipeline, month_old=("succeeded", 31), week_old=("succeeded", 8))
    assert deletes_requested(pipeline.tick(SENSOR)) == ["month_old"]


@pytest.mark.usefixtures("streaming_on")
def test_fetch_outcomes_are_pruned_to_twice_the_failure_window(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_FETCH_FAILURE_WINDOW", "5")
    with session_scope(pipeline.engine) as session:
        for i in range(25):
            record_fetch_outcome(session, "failed" if i % 2 else "ok", card_id=i)
    result = pipeline.tick(SENSOR)
    assert "pruned 15 fetch outcome(s) (kept the newest 10)" in skip_text(result)
    with session_scope(pipeline.engine) as session:
        kept = sorted(session.execute(sa.select(FetchOutcome.card_id)).scalars())
    assert kept == list(range(15, 25))
    assert "pruned 0 fetch outcome(s)" in skip_text(pipeline.tick(SENSOR))


def test_the_retention_setting_is_validated() -> None:
    assert load_settings({}).retention_days == 7
    assert load_settings({"STAGE_E_RETENTION_DAYS": "30"}).retention_days == 30
    for bad, message in (("0", "must be at least 1"), ("1.5", "is not a whole number")):
        with pytest.raises(SettingsError, match=f"STAGE_E_RETENTION_DAYS='{bad}' {message}"):
            load_settings({"STAGE_E_RETENTION_DAYS": bad})


def test_the_sensor_skips_while_streaming_is_off_and_touches_nothing(pipeline: Pipeline) -> None:
    add_batches(pipeline, old=("succeeded", 9))
    with session_scope(pipeline.engine) as session:
        for _ in range(3):
            record_fetch_outcome(session, "ok")
    result = pipeline.tick(SENSOR)
    assert skip_text(result) == "streaming is off (STAGE_E_STREAMING_ENABLED=false)"
    assert deletes_requested(result) == []
    assert batch_keys(pipeline) == partition_keys(pipeline) == {"old"}
    # The flag is read before any transaction: an unreachable catalogue still skips cleanly.
    sensor = defs.resolve_sensor_def(SENSOR)
    unreachable = StageEResource(database_url="sqlite:////nonexistent-folder/catalog.sqlite")
    context = build_sensor_context(instance=pipeline.instance, resources={"stage_e": unreachable})
    assert "streaming is off" in skip_text(sensor(context))


def test_the_cli_prune_deletes_partitions_and_rows_in_bounded_chunks(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", pipeline.instance.root_directory)
    monkeypatch.setattr(batch_retention, "PRUNE_CHUNK", 2)
    add_batches(pipeline, **{f"old-{i}": ("failed", 3 + i) for i in range(5)}, fresh=("succeeded", 1))
    out = CliRunner().invoke(app, ["batches", "prune", "--older-than-days", "2"])
    assert out.exit_code == 0, out.output
    assert "pruned 5 finished micro-batches older than 2 days" in out.output
    assert batch_keys(pipeline) == {"fresh"}
    assert partition_keys(pipeline) == {"fresh"}


def test_the_ledger_pages_through_every_record_of_the_window(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "2")
    run_ids = pipeline.drain()
    assert len(run_ids) == 5  # 10 cards, 2 per batch: 5 materializations per asset
    failed_runs = [f"failed-run-{i}" for i in range(3)]
    pipeline.instance.add_dynamic_partitions("micro_batches", [f"mb-failed-{i}" for i in range(3)])
    for i, run_id in enumerate(failed_runs):
        row = failure_row(
            batch_key=f"mb-failed-{i}",
            card_count=2,
            trigger_reason="card-created",
            attempt=1,
            run_id=run_id,
            failure_reason="RuntimeError: boom",
            retry_batch_key=None,
        )
        pipeline.instance.report_runless_asset_event(
            AssetObservation(asset_key=AssetKey("stage_c_evidence"), partition=f"mb-failed-{i}", metadata=row)
        )

    entries = ledger_entries(pipeline.instance, page_size=2)

    by_run = {e.run_id: e for e in entries}
    assert len(entries) == len(by_run) == 8
    assert set(by_run) == set(run_ids) | set(failed_runs)
    for run_id in run_ids:
        entry = by_run[run_id]
        assert entry.status == "completed"
        assert set(STAGE_C_FIELDS) | set(STAGE_D_FIELDS) <= set(entry.fields)
    assert [by_run[r].status for r in failed_runs] == ["failed"] * 3
    assert [e.at for e in entries] == sorted(e.at for e in entries)


@pytest.mark.usefixtures("streaming_on")
def test_a_partition_an_unfinished_backfill_targets_is_never_deleted(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 2: the backfill daemon fails a backfill whose partition was deleted and cancels its
    queued runs, so an abandoned or expired sweep batch keeps its partition until its backfill ends."""
    from stage_e_dagster.defs.sweep import launch_sweep

    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    launch = launch_sweep(pipeline.instance, defs.resolve_asset_graph(), load_settings(), max_batches=3)
    assert launch.backfill_id is not None and len(launch.batch_keys) >= 2
    abandoned_key, expired_key = launch.batch_keys[:2]
    add_batches(pipeline, plain_abandoned=("abandoned", 1))  # no backfill: goes after the grace
    with session_scope(pipeline.engine) as session:
        for key, status, age in ((abandoned_key, "abandoned", timedelta(hours=1)),
                                 (expired_key, "failed", timedelta(days=30))):
            batch = session.get(MicroBatch, key)
            batch.status, batch.finished_at = status, utcnow() - age
    first = pipeline.tick(SENSOR)
    assert deletes_requested(first) == ["plain_abandoned"], skip_text(first)
    pipeline.tick(SENSOR)
    assert {abandoned_key, expired_key} <= partition_keys(pipeline) & batch_keys(pipeline)


@pytest.mark.usefixtures("streaming_on")
def test_a_backfill_launched_from_the_ui_is_spared_and_a_live_sweep_does_not_stop_abandoned_deletion(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention spares every partition an unfinished backfill over ``micro_batches`` targets, whoever
    launched it (the UI's backfill records nothing on the batch rows), and a sweep's abandoned batch that
    must wait holds back only itself: the abandoned batches after it still lose their partitions, and it
    goes once its backfill has finished."""
    from stage_e_dagster.defs import dagster_internals as internals
    from stage_e_dagster.defs.sweep import SWEEP_ASSETS, launch_sweep

    # A backfill a person launched in the UI over two old batches: one abandoned, one expired.
    add_batches(pipeline, ui_abandoned=("abandoned", 2), ui_expired=("failed", 30))
    ui_backfill = internals.submit_asset_backfill(
        pipeline.instance, defs.resolve_asset_graph(), backfill_id=internals.new_backfill_id(),
        partition_keys=["ui_abandoned", "ui_expired"], asset_keys=SWEEP_ASSETS, tags={}, title="from the UI",
        description="launched from the asset page")
    # A live sweep whose first batch was abandoned before some plain abandoned batches.
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "3")
    launch = launch_sweep(pipeline.instance, defs.resolve_asset_graph(), load_settings(), max_batches=2)
    assert launch.backfill_id is not None
    swept = launch.batch_keys[0]
    with session_scope(pipeline.engine) as session:
        batch = session.get(MicroBatch, swept)
        batch.status, batch.finished_at = "abandoned", utcnow() - timedelta(hours=3)
    add_batches(pipeline, later_abandoned=("abandoned", 0.05), latest_abandoned=("abandoned", 0.01))

    first = pipeline.tick(SENSOR)
    assert sorted(deletes_requested(first)) == ["later_abandoned", "latest_abandoned"], skip_text(first)
    pipeline.tick(SENSOR)
    assert {"ui_abandoned", "ui_expired", swept} <= partition_keys(pipeline) & batch_keys(pipeline)

    # Both backfills end: what they spared goes.
    for backfill_id in (ui_backfill, launch.backfill_id):
        backfill = pipeline.instance.get_backfill(backfill_id)
        pipeline.instance.update_backfill(backfill.with_status(internals.BulkActionStatus.COMPLETED_FAILED))
    third = pipeline.tick(SENSOR)
    assert sorted(deletes_requested(third)) == sorted(["ui_abandoned", "ui_expired", swept]), skip_text(third)
