"""The Dagster internals adapter: each internal still exists and still works, and nothing else imports one.

If a Dagster upgrade moves or changes an internal, these tests fail before any sensor does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from dagster import AssetKey, DagsterRunStatus, instance_for_test
from dagster._core.storage.dagster_run import ACTIVE_RUN_STATUSES, FINISHED_STATUSES, NOT_FINISHED_STATUSES

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import MicroBatch
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs import dagster_internals as internals
from stage_e_dagster.defs.hold import ACTIVE_STATUSES
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.defs.run_ends import ENDED, NOT_ENDED
from stage_e_dagster.defs.sensors.dispatching import RUNNING
from stage_e_dagster.defs.sweep import launch_sweep
from stage_e_dagster.settings import load_settings

from .conftest import Pipeline

PACKAGE = Path(__file__).resolve().parents[2] / "stage_e_dagster"
ADAPTER = Path("defs") / "dagster_internals.py"
ASSETS = [AssetKey("stage_c_evidence"), AssetKey("stage_d_verdicts")]


def test_the_internals_the_adapter_imports_have_the_shape_it_uses() -> None:
    assert isinstance(defs.resolve_asset_graph(), internals.BaseAssetGraph)
    assert internals.BulkActionStatus.REQUESTED.value == internals.REQUESTED
    assert callable(internals.PartitionBackfill.from_asset_partitions)
    backfill_id = internals.new_backfill_id()
    assert backfill_id.isalpha() and backfill_id.islower() and len(backfill_id) <= 32  # fits micro_batches.backfill_id


def test_a_backfill_submitted_through_the_adapter_reads_back_until_it_is_canceled() -> None:
    key = "mb-20260101T000000-0000abcd"
    with instance_for_test() as instance:
        instance.add_dynamic_partitions(micro_batches.name, [key])
        backfill_id = internals.new_backfill_id()
        returned = internals.submit_asset_backfill(
            instance,
            defs.resolve_asset_graph(),
            backfill_id=backfill_id,
            partition_keys=[key],
            asset_keys=ASSETS,
            tags={"stage_e/dispatch": "micro-batch"},
            title="one batch",
            description="adapter test",
        )
        assert returned == backfill_id
        backfill = instance.get_backfill(backfill_id)
        assert backfill is not None and backfill.is_asset_backfill
        assert backfill.tags == {"stage_e/dispatch": "micro-batch"} and backfill.title == "one batch"
        assert set(backfill.asset_selection) == set(ASSETS)
        assert internals.backfill_status(instance, backfill_id) == "REQUESTED"
        assert internals.backfill_is_requested(instance, backfill_id)

        instance.update_backfill(backfill.with_status(internals.BulkActionStatus.CANCELING))
        assert internals.backfill_status(instance, backfill_id) == "CANCELING"
        assert not internals.backfill_is_requested(instance, backfill_id)

        assert internals.backfill_status(instance, "nosuchid") is None
        assert not internals.backfill_is_requested(instance, "nosuchid")


def test_the_sweep_records_its_backfill_id_on_every_batch_it_launches(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "4")
    launch = launch_sweep(pipeline.instance, defs.resolve_asset_graph(), load_settings(), max_batches=10)
    assert launch.backfill_id and launch.batch_keys
    with session_scope(pipeline.engine) as session:
        owners = dict(session.execute(sa.select(MicroBatch.batch_key, MicroBatch.backfill_id)).all())
    assert owners == {key: launch.backfill_id for key in launch.batch_keys}
    assert internals.backfill_is_requested(pipeline.instance, launch.backfill_id)


# Dagster's private names, each as it would be written outside the adapter: a private module imported
# or run (``dagster._core...``, ``python -m dagster._daemon``), and attributes and storage calls Dagster
# does not mark public.
PRIVATE_NAMES = {
    "a private module": re.compile(r"\bdagster\._\w"),
    "a sensor context's instance_ref": re.compile(r"\.instance_ref\b"),
    "RepositoryDefinition.asset_graph": re.compile(r"\.asset_graph\b"),
    "the event log storage's pool calls": re.compile(r"\bevent_log_storage\b"),
}


def private_name_users(pattern: re.Pattern[str]) -> list[str]:
    return sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE) != ADAPTER and pattern.search(path.read_text(encoding="utf-8"))
    )


@pytest.mark.parametrize("what", list(PRIVATE_NAMES))
def test_only_the_adapter_uses_dagster_private_names(what: str) -> None:
    offenders = private_name_users(PRIVATE_NAMES[what])
    assert offenders == [], f"{what} outside {ADAPTER}: {offenders}"


@pytest.mark.parametrize(
    ("what", "line"),
    [
        ("a private module", "from dagster._core.storage.dagster_run import FINISHED_STATUSES"),
        ("a private module", 'dagster_command("dagster._daemon", "run", "-w", workspace)'),
        ("a sensor context's instance_ref", "ref = context.instance_ref"),
        ("RepositoryDefinition.asset_graph", "launch_sweep(instance, context.repository_def.asset_graph, cfg)"),
        ("the event log storage's pool calls", "instance.event_log_storage.set_concurrency_slots(POOL, 0)"),
    ],
)
def test_the_guard_catches_each_private_name(what: str, line: str) -> None:
    """Each pattern matches the use it is there for, and public names stay clear of it."""
    assert PRIVATE_NAMES[what].search(line)
    public_uses = ("defs.resolve_asset_graph()", "import dagster", "dagster.AssetKey", "build_sensor_context(i)")
    for public in public_uses:
        assert not PRIVATE_NAMES[what].search(public)


def test_the_adapter_gives_the_pool_limit_back_as_set() -> None:
    pools = {"concurrency": {"pools": {"granularity": "run", "default_limit": 2}}}
    with instance_for_test(overrides=pools) as instance:
        assert internals.pool_limit(instance, "some_pool") is None
        internals.set_pool_limit(instance, "some_pool", 0)
        assert internals.pool_limit(instance, "some_pool") == 0
        internals.delete_pool_limit(instance, "some_pool")
        assert internals.pool_limit(instance, "some_pool") is None


def test_every_run_status_is_either_ended_or_in_progress() -> None:
    """The project's status groups come from the adapter: Dagster's finished list and its complement, so
    MANAGED (in neither of Dagster's lists) and any status a Dagster upgrade adds count as not ended."""
    assert ENDED is internals.FINISHED_STATUSES is FINISHED_STATUSES
    assert NOT_ENDED is internals.NOT_FINISHED_STATUSES and ACTIVE_STATUSES is internals.NOT_FINISHED_STATUSES
    assert RUNNING is internals.ACTIVE_RUN_STATUSES is ACTIVE_RUN_STATUSES
    assert set(NOT_FINISHED_STATUSES) | {DagsterRunStatus.MANAGED} == set(NOT_ENDED)
    assert set(ENDED) | set(NOT_ENDED) == set(DagsterRunStatus) and not set(ENDED) & set(NOT_ENDED)
    assert set(RUNNING) <= set(NOT_ENDED)
