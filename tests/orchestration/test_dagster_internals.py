"""The Dagster internals adapter: each internal still exists and still works, and nothing else imports one.

If a Dagster upgrade moves or changes an internal, these tests fail before any sensor does.
"""

from __future__ import annotations

import re
from pathlib import Path

import dagster
import pytest
import sqlalchemy as sa
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter, instance_for_test
from dagster._core.storage.dagster_run import ACTIVE_RUN_STATUSES, FINISHED_STATUSES, NOT_FINISHED_STATUSES

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import MicroBatch
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs import dagster_internals as internals
from stage_e_dagster.defs import run_failures
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.defs.run_ends import ENDED, NOT_ENDED
from stage_e_dagster.defs.run_queue import ACTIVE_STATUSES, RUNNING
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
# or run (``dagster._core...``, ``python -m dagster._daemon``, ``python -m dagster_dg_cli.cli``), and
# the attributes and calls Dagster does not mark public.
PRIVATE_NAMES = {
    "a private module": re.compile(r"\bdagster\._\w"),
    "a sensor context's instance_ref": re.compile(r"\.instance_ref\b"),
    "RepositoryDefinition.asset_graph": re.compile(r"\.asset_graph\b"),
    "the event log storage's pool calls": re.compile(r"\bevent_log_storage\b"),
    "DagsterInstance.get_runs": re.compile(r"\.get_runs\("),
    "DagsterInstance.get_runs_count": re.compile(r"\.get_runs_count\("),
    "DagsterInstance.add_run_tags": re.compile(r"\.add_run_tags\("),
    "DagsterInstance.get_records_for_run": re.compile(r"\.get_records_for_run\("),
    "an event record's fields": re.compile(r"\.(?:event_log_entry|event_specific_data|step_failure_data)\b"),
    "DagsterInstance.get_daemon_heartbeats": re.compile(r"\.get_daemon_heartbeats\("),
    "DagsterInstance.get_existing_dynamic_partitions": re.compile(r"\.get_existing_dynamic_partitions\("),
    "the run coordinator": re.compile(r"\.run_coordinator\b"),
    "the run storage": re.compile(r"\.run_storage\b"),
    "DagsterInstance.from_ref": re.compile(r"\bDagsterInstance\.from_ref\b"),
    "the dg CLI's module": re.compile(r"\bdagster_dg_cli\.cli\b"),
}
# Where the project's own code lives: the package, the scripts and the benches.
ROOT = PACKAGE.parent
SCANNED = ("stage_e_dagster", "scripts", "bench")
# The reads of an event record the adapter leaves outside: a public call's record (``fetch_run_status_changes``
# gives ``EventLogRecord``s) carries the run id on its entry.
ALLOWED_LINES = {
    "an event record's fields": re.compile(r"fetch_run_status_changes|r\.event_log_entry\.run_id"),
}


def project_files() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py")
                  if p.relative_to(ROOT) != Path("stage_e_dagster") / ADAPTER)


def private_name_users(what: str) -> list[str]:
    pattern, allowed = PRIVATE_NAMES[what], ALLOWED_LINES.get(what)
    return sorted(
        f"{path.relative_to(ROOT)}:{number}"
        for path in project_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and not (allowed and allowed.search(line))
    )


@pytest.mark.parametrize("what", list(PRIVATE_NAMES))
def test_only_the_adapter_uses_dagster_private_names(what: str) -> None:
    offenders = private_name_users(what)
    assert offenders == [], f"{what} outside {ADAPTER}: {offenders}"


@pytest.mark.parametrize(
    ("what", "line"),
    [
        ("a private module", "from dagster._core.storage.dagster_run import FINISHED_STATUSES"),
        ("a private module", 'dagster_command("dagster._daemon", "run", "-w", workspace)'),
        ("a sensor context's instance_ref", "ref = context.instance_ref"),
        ("RepositoryDefinition.asset_graph", "launch_sweep(instance, context.repository_def.asset_graph, cfg)"),
        ("the event log storage's pool calls", "instance.event_log_storage.set_concurrency_slots(POOL, 0)"),
        ("DagsterInstance.get_runs", "for run in instance.get_runs(RunsFilter(tags={PARTITION_TAG: keys})):"),
        ("DagsterInstance.get_runs_count", "return self.instance.get_runs_count(RunsFilter(statuses=NOT_ENDED))"),
        ("DagsterInstance.add_run_tags", "context.instance.add_run_tags(context.run.run_id, tags)"),
        ("DagsterInstance.get_records_for_run", "instance.get_records_for_run(run_id, of_type=kind).records"),
        ("an event record's fields", "mat = record.event_log_entry.asset_materialization"),
        ("an event record's fields", 'error = getattr(event.event_specific_data, "error", None)'),
        ("DagsterInstance.get_daemon_heartbeats", "return bool(instance.get_daemon_heartbeats())"),
        ("DagsterInstance.get_existing_dynamic_partitions", "instance.get_existing_dynamic_partitions(name, keys)"),
        ("the run coordinator", "instance.run_coordinator.cancel_run(run.run_id)"),
        ("the run storage", "with instance.run_storage.connect() as conn:"),
        ("DagsterInstance.from_ref", "instance = DagsterInstance.from_ref(ref)"),
        ("the dg CLI's module", 'cmd = dagster_command("dagster_dg_cli.cli", "dev", "-w", workspace)'),
    ],
)
def test_the_guard_catches_each_private_name(what: str, line: str) -> None:
    """Each pattern matches the use it is there for, and public names stay clear of it."""
    assert PRIVATE_NAMES[what].search(line)
    public_uses = ("defs.resolve_asset_graph()", "import dagster", "dagster.AssetKey", "build_sensor_context(i)",
                   "instance.get_run_records(RunsFilter(statuses=NOT_ENDED))", "instance.get_run_by_id(run_id)",
                   "instance.fetch_materializations(AssetKey('a'), limit=5)", "instance.has_dynamic_partition(n, k)",
                   "DagsterInstance.get()", "internals.runs(instance, RunsFilter())", '"dg", "dev"')
    for public in public_uses:
        assert not PRIVATE_NAMES[what].search(public)


# ``DagsterInstance`` names Dagster 1.13 does not mark ``@public`` that the project may still use outside the
# adapter: an instance's life (``from_config``, ``dispose``, ``get_ref`` for a test's sensor context) and the
# event reads the benches time (``all_logs``), plus one that is only a word elsewhere (alembic's ``upgrade``).
TOLERATED_INSTANCE_NAMES = {"from_config", "dispose", "get_ref", "all_logs", "upgrade"}


def test_no_other_non_public_instance_name_is_used_outside_the_adapter() -> None:
    """Any other ``DagsterInstance`` method Dagster leaves unmarked, called outside the adapter, fails here
    first; so a new direct use of a non-public name needs the adapter or a reason in the list above."""
    from dagster._annotations import is_public

    private = {name for name in dir(DagsterInstance)
               if not name.startswith("_") and not is_public(getattr(DagsterInstance, name))}
    # the names the issue lists are among them: Dagster does not mark them public
    assert {"get_runs", "get_runs_count", "add_run_tags", "get_records_for_run", "get_daemon_heartbeats",
            "get_existing_dynamic_partitions", "run_coordinator", "from_ref", "run_storage"} <= private
    assert {"get_run_records", "fetch_materializations", "has_dynamic_partition"}.isdisjoint(private)
    pattern = re.compile(r"\.(" + "|".join(sorted(private - TOLERATED_INSTANCE_NAMES, key=len, reverse=True)) + r")\b")
    offenders = sorted(
        f"{path.relative_to(ROOT)}:{number}: .{found.group(1)}"
        for path in project_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if not line.lstrip().startswith("#")
        for found in [pattern.search(line)] if found
    )
    assert offenders == [], f"non-public DagsterInstance names outside {ADAPTER}: {offenders}"


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


DAGSTER_SOURCE = Path(dagster.__file__).resolve().parent


def test_the_messages_the_failure_classifier_reads_are_still_dagsters() -> None:
    """``defs/run_failures.py`` and ``defs/max_runtime.py`` read text Dagster writes; each is pinned to
    the installed Dagster's own source, so an upgrade that rewords one fails here, not in a drain."""
    from dagster._core.events import RunFailureReason
    from dagster._core.execution.plan.objects import ErrorSource
    from dagster._utils import get_run_crash_explanation

    from stage_e_dagster.defs import max_runtime

    def source(relative: str) -> str:
        return (DAGSTER_SOURCE / relative).read_text(encoding="utf-8")

    # The text itself, where Dagster writes it.
    assert f'"{run_failures._MARKED_FAILED_OUTSIDE}"' in source("_core/instance/methods/event_methods.py")
    monitor = source("_daemon/monitoring/run_monitoring.py")
    assert f'f"{run_failures._MONITOR_DETECTED} {{check_health_result}}.' in monitor
    for start in max_runtime._MONITOR_MESSAGES:
        assert f'"{start} of {{int(max_time)}} seconds.' in monitor
    assert 'prefix=f"Run execution process for {run.run_id}"' in source("_grpc/server.py")
    assert 'prefix=f"Multiprocess executor: child process for step {key}"' in source("_core/executor/multiprocess.py")
    assert '"GRPC server: Subprocess for {run_id} terminated unexpectedly with "' in source("_grpc/server.py")
    assert f"class {run_failures.CHILD_PROCESS_CRASH}(Exception)" in source("_core/executor/child_process_executor.py")

    # The patterns match what Dagster's own formatter writes, for a signal and for an exit code.
    for prefix in ("Run execution process for 0f1e", "Multiprocess executor: child process for step stage_c_evidence"):
        for code in (-9, -6, 1):
            explained = get_run_crash_explanation(prefix, code)
            assert run_failures._CRASH_EXPLANATION.search(explained), explained
    assert run_failures._LAUNCH_CRASH.search("GRPC server: Subprocess for 0f1e terminated unexpectedly with exit code -9")

    # The enum values it compares against.
    assert {"UNEXPECTED_TERMINATION", "RUN_WORKER_RESTART", "STEP_FAILURE"} <= {r.value for r in RunFailureReason}
    assert run_failures._DEATH_FAILURE_REASONS <= {r.value for r in RunFailureReason}
    assert ErrorSource.INTERRUPT.value == "INTERRUPT"


def test_the_adapter_reads_a_runs_events_and_materializations_as_plain_fields(pipeline: Pipeline, monkeypatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    key = pipeline.tick("card_created_sensor").run_requests[0].partition_key
    failed = pipeline.run_failing_in_stage_c(key, {}, monkeypatch)
    [step_failure] = internals.run_events(pipeline.instance, failed.run_id, DagsterEventType.STEP_FAILURE)
    assert step_failure.event_type == "STEP_FAILURE" and step_failure.error is not None
    assert step_failure.error_source == "USER_CODE_ERROR"
    assert run_failures.error_summary(step_failure.error) == "RuntimeError: stage C broke"
    [run_failure] = internals.run_events(pipeline.instance, failed.run_id, DagsterEventType.RUN_FAILURE,
                                         newest_first=True, limit=1)
    assert run_failure.failure_reason == "STEP_FAILURE" and run_failure.message
    assert internals.run_materializations(pipeline.instance, failed.run_id) == []
    assert internals.runs_count(pipeline.instance) == 1
    assert [r.run_id for r in internals.runs(pipeline.instance, RunsFilter(tags={"dagster/partition": key}))] == [
        failed.run_id]
    internals.add_run_tags(pipeline.instance, failed.run_id, {"stage_e/test": "yes"})
    assert pipeline.instance.get_run_by_id(failed.run_id).tags["stage_e/test"] == "yes"
    assert internals.existing_partitions(pipeline.instance, micro_batches.name, [key, "nosuch"]) == {key}
    assert internals.daemon_heartbeats(pipeline.instance) == []
    assert internals.instance_from_ref(pipeline.instance.get_ref()).get_run_by_id(failed.run_id) is not None


def test_every_backfill_status_is_finished_or_unfinished() -> None:
    from stage_e_dagster.defs.abandoned import BACKFILL_FINISHED

    unfinished = {status.value for status in internals.UNFINISHED_BACKFILL_STATUSES}
    every = {status.value for status in internals.BulkActionStatus}
    assert BACKFILL_FINISHED | unfinished == every and not BACKFILL_FINISHED & unfinished
