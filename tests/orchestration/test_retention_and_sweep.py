"""Retention of old batch partitions, and the sweep's single backfill on a real instance."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from dagster import AssetKey, AssetRecordsFilter

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import MicroBatch
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.retention import prune_batches
from stage_e_dagster.defs.sweep import SweepRefused, launch_sweep
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline


def test_prune_deletes_old_finished_partitions_and_keeps_their_events(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "5")
    pipeline.drain()
    with session_scope(pipeline.engine) as session:
        keys = sorted(session.execute(sa.select(MicroBatch.batch_key)).scalars())
        old = keys[0]
        session.get(MicroBatch, old).finished_at = utcnow() - timedelta(days=10)
    assert prune_batches(pipeline.instance, pipeline.engine, finished_before=utcnow() - timedelta(days=7)) == 1
    assert set(pipeline.instance.get_dynamic_partitions("micro_batches")) == set(keys) - {old}
    with session_scope(pipeline.engine) as session:
        assert session.get(MicroBatch, old) is None
    records = pipeline.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("stage_c_evidence"), asset_partitions=[old]), limit=5
    ).records
    assert len(records) == 1  # the ledger keeps the pruned batch's history


def test_sweep_launches_one_backfill_and_never_resweeps_cards_in_flight(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "4")
    graph = defs.resolve_asset_graph()
    first = launch_sweep(pipeline.instance, graph, load_settings(), max_batches=10)
    assert first.backfill_id and len(first.batch_keys) == 3 and first.card_count == 10
    [backfill] = pipeline.instance.get_backfills()
    assert backfill.backfill_id == first.backfill_id
    targeted = {ap.partition_key for ap in backfill.asset_backfill_data.target_subset.iterate_asset_partitions()}
    assert targeted == set(first.batch_keys) == set(pipeline.instance.get_dynamic_partitions("micro_batches"))
    assert backfill.tags["stage_e/dispatch"] == "micro-batch"
    assert backfill.tags["stage_e/trigger_reason"] == "backstop-sweep"
    # Everything is claimed by the in-flight backfill: a second sweep launches nothing.
    second = launch_sweep(pipeline.instance, graph, load_settings(), max_batches=10)
    assert second.backfill_id is None and not second.empty_after_full_lap
    assert len(pipeline.instance.get_backfills()) == 1


def test_sweep_refuses_while_streaming_is_off(pipeline: Pipeline) -> None:
    with pytest.raises(SweepRefused, match="streaming is off"):
        launch_sweep(pipeline.instance, defs.resolve_asset_graph(), load_settings(), max_batches=10)
    assert pipeline.instance.get_backfills() == []
