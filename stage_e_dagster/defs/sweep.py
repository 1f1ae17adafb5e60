"""Launching a backstop sweep: batches from the walk, their partitions, and one Dagster backfill.

Dagster has no public call that submits an asset backfill from Python; ``PartitionBackfill`` and
``add_backfill`` are what the webserver's launch mutation uses and what the backfill daemon runs.
The backfill shows on the UI's Backfills page, and every run it makes is capped by the dispatch pool.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dagster import AssetKey, DagsterInstance
from dagster._core.definitions.assets.graph.base_asset_graph import BaseAssetGraph
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from ..catalog.base import utcnow
from ..catalog.engine import engine_for, session_scope
from ..dispatch.guard import check_gate
from ..dispatch.sizing import plan_for_sweep
from ..dispatch.sweep import SWEEP_TRIGGER, walk_backlog
from ..settings import Settings
from .partitions import micro_batches
from .tags import dispatch_tags

SWEEP_ASSETS = [AssetKey("stage_c_evidence"), AssetKey("stage_d_verdicts")]


class SweepRefused(Exception):
    """The gate is closed: the sweep launches nothing."""


@dataclass(frozen=True)
class SweepLaunch:
    backfill_id: str | None
    batch_keys: list[str]
    card_count: int
    laps_completed: int
    empty_after_full_lap: bool


def keys_in_flight_backfills(instance: DagsterInstance) -> set[str]:
    """Partition keys that a requested (not yet finished) backfill already targets."""
    keys: set[str] = set()
    for backfill in instance.get_backfills(filters=BulkActionsFilter(statuses=[BulkActionStatus.REQUESTED])):
        data = backfill.asset_backfill_data
        if data is None:
            continue
        for asset_partition in data.target_subset.iterate_asset_partitions():
            if asset_partition.partition_key:
                keys.add(asset_partition.partition_key)
    return keys


def launch_sweep(
    instance: DagsterInstance, asset_graph: BaseAssetGraph, settings: Settings, *, max_batches: int
) -> SweepLaunch:
    """Walk the backlog, record batches, add their partitions and submit one backfill over them."""
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        verdict = check_gate(session, settings)
        if not verdict.allowed:
            raise SweepRefused(verdict.reason)
        walk = walk_backlog(
            session, plan_for_sweep(settings, max_batches=max_batches), now=utcnow(), claim_ttl_s=settings.claim_ttl_s
        )
        covered = keys_in_flight_backfills(instance)
        batches = [b for b in walk.batches if b.batch_key not in covered]
        keys = [b.batch_key for b in batches]
        card_count = sum(len(b.card_ids) for b in batches)
    if not keys:
        return SweepLaunch(None, [], 0, walk.laps_completed, walk.empty_after_full_lap)
    instance.add_dynamic_partitions(micro_batches.name, keys)
    backfill_id = make_new_backfill_id()
    instance.add_backfill(
        PartitionBackfill.from_asset_partitions(
            backfill_id=backfill_id,
            asset_graph=asset_graph,
            partition_names=keys,
            asset_selection=SWEEP_ASSETS,
            backfill_timestamp=time.time(),
            tags=dispatch_tags(settings, trigger_reason=SWEEP_TRIGGER),
            dynamic_partitions_store=instance,
            all_partitions=False,
            title=f"stage-e backstop sweep: {len(keys)} micro-batches, {card_count} cards",
            description="Backstop sweep over the whole Stage C and Stage D backlog.",
            run_config=None,
        )
    )
    return SweepLaunch(backfill_id, keys, card_count, walk.laps_completed, walk.empty_after_full_lap)
