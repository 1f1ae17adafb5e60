"""The only module that imports ``dagster._core``: asset backfills submitted and read from Python.

Dagster 1.13 has no public way to submit an asset backfill outside the webserver, or to read one
back; everything else in the project uses public ``dagster`` names. Keep each internal behind a
plain function here, so a Dagster upgrade that moves one breaks
``tests/orchestration/test_dagster_internals.py`` and this file, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from dagster import AssetKey, DagsterInstance

# What ``Definitions.resolve_asset_graph()`` returns, for annotations; ``dagster`` does not export the type.
from dagster._core.definitions.assets.graph.base_asset_graph import BaseAssetGraph

# What the webserver's launch mutation builds and the backfill daemon executes; no public constructor or filter.
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

# The id format the UI and the ``dagster/backfill`` run tag use; Dagster exports no generator for it.
from dagster._core.utils import make_new_backfill_id

__all__ = [
    "BaseAssetGraph",
    "backfill_is_requested",
    "backfill_status",
    "new_backfill_id",
    "submit_asset_backfill",
]

REQUESTED = BulkActionStatus.REQUESTED.value


def new_backfill_id() -> str:
    """A fresh backfill id (8 lowercase letters), to record on the catalogue rows before submitting."""
    return make_new_backfill_id()


def submit_asset_backfill(
    instance: DagsterInstance,
    asset_graph: BaseAssetGraph,
    *,
    backfill_id: str,
    partition_keys: Sequence[str],
    asset_keys: Sequence[AssetKey],
    tags: Mapping[str, str],
    title: str,
    description: str,
) -> str:
    """Submit one asset backfill over ``partition_keys`` of ``asset_keys``; the backfill daemon runs it.

    The partitions must exist already. Returns ``backfill_id``.
    """
    instance.add_backfill(
        PartitionBackfill.from_asset_partitions(
            backfill_id=backfill_id,
            asset_graph=asset_graph,
            partition_names=list(partition_keys),
            asset_selection=list(asset_keys),
            backfill_timestamp=time.time(),
            tags=dict(tags),
            dynamic_partitions_store=instance,
            all_partitions=False,
            title=title,
            description=description,
            run_config=None,
        )
    )
    return backfill_id


def backfill_status(instance: DagsterInstance, backfill_id: str) -> str | None:
    """The backfill's status (``"REQUESTED"``, ``"CANCELING"``, ``"COMPLETED_SUCCESS"``, ...); None if unknown."""
    backfill = instance.get_backfill(backfill_id)
    return None if backfill is None else backfill.status.value


def backfill_is_requested(instance: DagsterInstance, backfill_id: str) -> bool:
    """True while the daemon may still launch runs for it; a canceling, failing or ended one launches no more."""
    return backfill_status(instance, backfill_id) == REQUESTED
