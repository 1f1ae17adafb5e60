"""Launching a backstop sweep: batches from the walk, their partitions, and one Dagster backfill.

The backfill id is chosen first and stored on every batch row in the transaction that records
the batches, so a dispatch sensor can always tell which backfill owns a pending batch (and that a
batch whose backfill was never submitted is owned by nobody). The backfill shows on the UI's
Backfills page, and every run it makes is capped by the dispatch pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dagster import AssetKey, DagsterInstance

from ..catalog.base import utcnow
from ..catalog.engine import engine_for, session_scope
from ..dispatch.backlog_walk import SWEEP_TRIGGER, walk_backlog
from ..dispatch.guard import check_gate
from ..dispatch.sizing import plan_for_sweep
from ..settings import Settings
from .dagster_internals import BaseAssetGraph, new_backfill_id, submit_asset_backfill
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


def launch_sweep(
    instance: DagsterInstance,
    asset_graph: BaseAssetGraph,
    settings: Settings,
    *,
    max_batches: int,
    progress: Callable[[int], None] | None = None,
) -> SweepLaunch:
    """Walk the backlog, record batches owned by a new backfill id, add their partitions, submit the backfill.

    Cards already in flight are claimed, so the walk never batches them again. ``progress`` gets the
    cards batched so far.
    """
    backfill_id = new_backfill_id()
    engine = engine_for(settings.database_url)
    # The gate in a transaction of its own that commits: a fresh sample over a bar opens a trip, which the
    # refusal names and which must stay open (raising inside the walk's transaction rolled it back).
    with session_scope(engine) as session:
        verdict = check_gate(session, settings)
    if not verdict.allowed:
        raise SweepRefused(verdict.reason)
    with session_scope(engine) as session:
        walk = walk_backlog(
            session,
            plan_for_sweep(settings, max_batches=max_batches, session=session),
            now=utcnow(),
            claim_ttl_s=settings.claim_ttl_s,
            progress=progress,
        )
        for batch in walk.batches:
            batch.backfill_id = backfill_id
        keys = [b.batch_key for b in walk.batches]
        card_count = walk.card_count
    if not keys:
        return SweepLaunch(None, [], 0, walk.laps_completed, walk.empty_after_full_lap)
    instance.add_dynamic_partitions(micro_batches.name, keys)
    submit_asset_backfill(
        instance,
        asset_graph,
        backfill_id=backfill_id,
        partition_keys=keys,
        asset_keys=SWEEP_ASSETS,
        tags=dispatch_tags(settings, trigger_reason=SWEEP_TRIGGER),
        title=f"stage-e backstop sweep: {len(keys)} micro-batches, {card_count} cards",
        description="Backstop sweep over the whole Stage C and Stage D backlog.",
    )
    return SweepLaunch(backfill_id, keys, card_count, walk.laps_completed, walk.empty_after_full_lap)
