"""The only module that touches Dagster's private names: ``dagster._core`` imports, and the
attributes and storage calls Dagster does not mark public.

Dagster 1.13 has no public way to submit an asset backfill outside the webserver or to read one
back, to set a pool's limit from Python, to reach a repository's asset graph or a sensor context's
instance reference, or to name the run statuses it groups as finished and not finished. Nor does it
mark public the ``DagsterInstance`` calls this project reads runs, run tags, a run's events, the
daemons' heartbeats and existing partitions with, cancels a queued run with, or opens an instance
from a reference with, nor the ``dg`` CLI's module. Everything else in the project, in ``scripts/``
and in ``bench/`` uses public ``dagster`` names. Keep each internal behind a plain function or
name here, so a Dagster upgrade that moves one breaks ``tests/orchestration/test_dagster_internals.py``
and this file, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RepositoryDefinition,
    RunsFilter,
    SensorEvaluationContext,
)

# What ``Definitions.resolve_asset_graph()`` returns, for annotations; ``dagster`` does not export the type.
from dagster._core.definitions.assets.graph.base_asset_graph import BaseAssetGraph

# What the webserver's launch mutation builds and the backfill daemon executes; no public constructor or filter.
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

# What a sensor context's instance reference is; a daemon's code server hands sensors one, not an instance.
from dagster._core.instance.ref import InstanceRef

# Dagster's own grouping of run statuses, so the project never keeps a list of its own that drifts.
from dagster._core.storage.dagster_run import ACTIVE_RUN_STATUSES, FINISHED_STATUSES

# The id format the UI and the ``dagster/backfill`` run tag use; Dagster exports no generator for it.
from dagster._core.utils import make_new_backfill_id

from ..stage_c.huge_pages import with_huge_pages

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "DG_CLI_MODULE",
    "FINISHED_STATUSES",
    "NOT_FINISHED_STATUSES",
    "UNFINISHED_BACKFILL_STATUSES",
    "UNSTARTED_STATUSES",
    "BaseAssetGraph",
    "InstanceRef",
    "RunEvent",
    "add_run_tags",
    "analyze_run_tables",
    "cancel_queued_run",
    "daemon_heartbeats",
    "existing_partitions",
    "insert_run_rows",
    "instance_from_ref",
    "run_events",
    "run_materializations",
    "runs",
    "runs_count",
    "backfill_is_requested",
    "backfill_status",
    "context_instance_ref",
    "delete_pool_limit",
    "fail_unstarted_run",
    "new_backfill_id",
    "partitions_unfinished_backfills_target",
    "pool_limit",
    "repository_asset_graph",
    "run_queue_limit",
    "run_tag_limit",
    "run_start_timeout_s",
    "run_storage_has_backfill_column",
    "set_pool_limit",
    "submit_asset_backfill",
    "unstarted_runs",
]

REQUESTED = BulkActionStatus.REQUESTED.value

# Every status Dagster does not count as finished. Dagster's own NOT_FINISHED_STATUSES leaves MANAGED
# (a run created for an executor outside Dagster, not yet started) out of both of its lists; as the
# complement of the finished ones, it and any status a Dagster upgrade adds count as not ended.
NOT_FINISHED_STATUSES = [status for status in DagsterRunStatus if status not in FINISHED_STATUSES]
# Created and not yet handed to the run queue or a launcher: no worker, no queue place of Dagster's.
UNSTARTED_STATUSES = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.MANAGED]


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


def context_instance_ref(context: SensorEvaluationContext) -> InstanceRef | None:
    """The instance reference the daemon's code server gave the sensor; None for a test's context
    built with an instance (``build_sensor_context(instance=...)``)."""
    return context.instance_ref


def repository_asset_graph(repository: RepositoryDefinition) -> BaseAssetGraph:
    """The asset graph of the code location a sensor runs in (what a backfill is built against)."""
    return repository.asset_graph


def run_start_timeout_s(instance: DagsterInstance) -> int:
    """``run_monitoring: start_timeout_seconds`` (Dagster's default 180 s; 0 or less turns its check off)."""
    return int(instance.run_monitoring_start_timeout_seconds)


def unstarted_runs(instance: DagsterInstance, *, created_before: datetime) -> list[DagsterRun]:
    """Runs still NOT_STARTED or MANAGED that were created before ``created_before`` (an indexed status filter)."""
    return [record.dagster_run for record in instance.get_run_records(
        RunsFilter(statuses=UNSTARTED_STATUSES, created_before=created_before))]


def fail_unstarted_run(instance: DagsterInstance, run_id: str, message: str) -> bool:
    """Mark the run failed, as Dagster's run monitor does for a run that did not start in time, if it is
    still unstarted when read again here; returns whether it was."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.status not in UNSTARTED_STATUSES:
        return False
    instance.report_run_failed(run, message)
    return True


def run_queue_limit(instance: DagsterInstance) -> int | None:
    """The run queue's ``max_concurrent_runs`` (runs of any job in progress at once); None when unlimited (-1)
    or the instance has no run queue."""
    queue = instance.get_concurrency_config().run_queue_config
    if queue is None or queue.max_concurrent_runs < 0:
        return None
    return queue.max_concurrent_runs


def run_tag_limit(instance: DagsterInstance, key: str) -> int | None:
    """The run queue's ``tag_concurrency_limits`` entry for every run carrying ``key`` whatever its value; None
    without one (or without a run queue)."""
    queue = instance.get_concurrency_config().run_queue_config
    entries = (queue.tag_concurrency_limits or []) if queue is not None else []
    # Key-wide as Dagster's TagConcurrencyLimitsCounter reads an entry: no value, or not one per value.
    limits = [entry["limit"] for entry in entries if entry["key"] == key and not isinstance(entry.get("value"), str)
              and not (entry.get("value") or {}).get("applyLimitPerUniqueValue")]
    return min(limits) if limits else None


def pool_limit(instance: DagsterInstance, pool: str) -> int | None:
    """The pool's own limit; None while it has none and the instance's ``default_limit`` applies."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    return None if info.using_default_limit else info.slot_count


def set_pool_limit(instance: DagsterInstance, pool: str, limit: int) -> None:
    """What ``dagster instance concurrency set POOL LIMIT`` does, from Python, without a restart."""
    instance.event_log_storage.set_concurrency_slots(pool, limit)


def delete_pool_limit(instance: DagsterInstance, pool: str) -> None:
    """Drop the pool's own limit, so the instance's ``default_limit`` applies again."""
    instance.event_log_storage.delete_concurrency_limit(pool)


# Read by Dagster's backfill daemon (``dagster/_core/execution/asset_backfill.py``), set nowhere by
# Dagster itself. Unset, a backfill pass that finds its assets missing because their code location is
# unreachable or failing to load (a code server restarting, a reload that failed) raises an error the
# daemon does not retry: the backfill goes FAILING and cancels every run it holds. Set, that pass is
# skipped and the backfill goes on once the location loads again.
BACKFILL_WAITS_FOR_ITS_LOCATION = {"DAGSTER_BACKFILL_RETRY_DEFINITION_CHANGED_ERROR": "1"}


def daemon_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus what every ``dagster-daemon`` this project starts or deploys runs with, so a sweep
    rides out a code server that is down or a location that fails to load for a pass; and the huge-page
    tunable, which the code servers it starts hand on to the run workers that read cards."""
    return with_huge_pages({**env, **BACKFILL_WAITS_FOR_ITS_LOCATION})


# The ``dg`` command line's module, for ``python -m``: ``dagster-dg-cli`` installs ``dg`` as a console
# script pointing at it, and a child started as ``python -m`` runs under the project's own interpreter.
DG_CLI_MODULE = "dagster_dg_cli.cli"


def instance_from_ref(ref: InstanceRef) -> DagsterInstance:
    """The instance an instance reference names (what a daemon's code server hands a sensor)."""
    return DagsterInstance.from_ref(ref)


def runs(instance: DagsterInstance, filters: RunsFilter | None = None, *, limit: int | None = None) -> list[DagsterRun]:
    """The runs matching ``filters``, newest first."""
    return list(instance.get_runs(filters, limit=limit))


def runs_count(instance: DagsterInstance, filters: RunsFilter | None = None) -> int:
    """How many runs match ``filters``."""
    return instance.get_runs_count(filters)


def add_run_tags(instance: DagsterInstance, run_id: str, tags: Mapping[str, str]) -> None:
    """Add (or overwrite) tags on a run, as the UI's tag editor does."""
    instance.add_run_tags(run_id, dict(tags))


def cancel_queued_run(instance: DagsterInstance, run_id: str) -> bool:
    """Cancel a QUEUED run through the run coordinator (the UI's *Terminate* on a queued run); returns
    whether the coordinator cancelled it."""
    return bool(instance.run_coordinator.cancel_run(run_id))


def daemon_heartbeats(instance: DagsterInstance) -> list[tuple[str, float]]:
    """(daemon id, heartbeat timestamp) of every daemon heartbeat the instance holds."""
    return [(beat.daemon_id, beat.timestamp) for beat in instance.get_daemon_heartbeats().values()]


def existing_partitions(instance: DagsterInstance, partitions_def_name: str, keys: Sequence[str]) -> set[str]:
    """Which of ``keys`` are partitions of the dynamic partitions definition (one read for all of them)."""
    return set(instance.get_existing_dynamic_partitions(partitions_def_name, list(keys))) if keys else set()


@dataclass(frozen=True)
class RunEvent:
    """The fields of one of a run's events that this project reads, as plain values.

    ``error`` is Dagster's serialised error (``message``, ``cls_name``, ``cause``, ``context``) of a
    failure or an engine event that carries one; ``failure_reason`` the ``RunFailureReason`` value of a
    RUN_FAILURE; ``user_failure_description`` a ``Failure``'s description and ``error_source`` the
    ``ErrorSource`` value of a STEP_FAILURE."""

    event_type: str
    message: str
    error: Any = None
    failure_reason: str | None = None
    user_failure_description: str | None = None
    error_source: str | None = None


def _enum_value(value: object) -> str | None:
    return getattr(value, "value", None) if value is not None else None


def _run_event(event: Any) -> RunEvent:
    data = event.event_specific_data
    user_failure = getattr(data, "user_failure_data", None)
    return RunEvent(
        event_type=event.event_type_value,
        message=event.message or "",
        error=getattr(data, "error", None),
        failure_reason=_enum_value(getattr(data, "failure_reason", None)),
        user_failure_description=getattr(user_failure, "description", None),
        error_source=_enum_value(getattr(data, "error_source", None)),
    )


def run_events(
    instance: DagsterInstance, run_id: str, event_type: DagsterEventType, *, limit: int | None = None,
    newest_first: bool = False,
) -> list[RunEvent]:
    """The run's events of one type (oldest first, or newest first), at most ``limit``."""
    records = instance.get_records_for_run(run_id, of_type=event_type, limit=limit, ascending=not newest_first).records
    return [_run_event(r.event_log_entry.dagster_event) for r in records if r.event_log_entry.dagster_event is not None]


def run_materializations(instance: DagsterInstance, run_id: str) -> list[AssetMaterialization]:
    """The asset materializations the run recorded, in order."""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    return [m for r in records if (m := r.event_log_entry.asset_materialization) is not None]


def run_storage_has_backfill_column(instance: DagsterInstance) -> bool:
    """Whether the run storage's ``runs`` table has its ``backfill_id`` column (a migrated instance)."""
    return bool(instance.run_storage.has_backfill_id_column())  # type: ignore[attr-defined]


def insert_run_rows(instance: DagsterInstance, rows: list[dict[str, Any]], tags: list[dict[str, Any]]) -> None:
    """Write rows straight into the run storage's ``runs`` and ``run_tags`` tables (what ``add_run``
    and the runs' status events would leave), for a bench that needs a long run history fast."""
    from dagster._core.storage.runs.schema import RunsTable, RunTagsTable

    with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
        conn.execute(RunsTable.insert(), rows)
        conn.execute(RunTagsTable.insert(), tags)


def analyze_run_tables(instance: DagsterInstance) -> None:
    """On PostgreSQL, refresh the planner's statistics of ``runs`` and ``run_tags`` after a bulk insert
    (autovacuum would have by the time a production instance held that history)."""
    with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE runs")
            conn.exec_driver_sql("ANALYZE run_tags")


# Backfill statuses under which the backfill daemon may still read the backfill's partitions.
UNFINISHED_BACKFILL_STATUSES = [BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING]


def partitions_unfinished_backfills_target(instance: DagsterInstance) -> set[str]:
    """Every partition key an unfinished backfill targets, whoever launched it (a sweep, the UI's asset or
    job page, the GraphQL API): one read of the backfills table for the unfinished ones. Deleting one of
    those partitions fails its backfill and cancels the backfill's queued runs."""
    from dagster._core.execution.backfill import BulkActionsFilter

    keys: set[str] = set()
    for backfill in instance.get_backfills(filters=BulkActionsFilter(statuses=UNFINISHED_BACKFILL_STATUSES)):
        if backfill.asset_backfill_data is not None:
            for subset in backfill.asset_backfill_data.target_subset.partitions_subsets_by_asset_key.values():
                keys.update(subset.get_partition_keys())
        keys.update(backfill.partition_names or ())  # a job backfill's partitions
    return keys
