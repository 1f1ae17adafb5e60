"""Drills of issue 19, part A, with the real daemon: two daemons on one PostgreSQL instance and catalogue
do no double work and show a warning; the envelope sensor's run-end cursor passes 150 other runs' ends
and settles a SIGKILLed dispatch run itself.

Slow by nature (daemons, code servers, run workers as processes).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter, job, op

from stage_e_dagster.catalog.engine import make_engine, session_scope
from stage_e_dagster.catalog.models import ImageEvidence, MicroBatch
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.defs.instance import PROJECT_ROOT, WORKSPACE_YAML
from stage_e_dagster.defs.ledger import ledger_entries
from tests.conftest import create_pg_database, drop_pg_database

from .conftest import ImageServer
from .test_daemon import (
    BIN,
    ConcurrencyProbe,
    Stack,
    assert_no_duplicates,
    run_with_evidence,
    serve_over_http,
)

pytestmark = pytest.mark.slow

DRILL_CARDS = 80


@pytest.mark.postgres
def test_two_daemons_on_one_postgres_instance_fetch_every_card_once_and_warn(tmp_path: Path) -> None:
    catalog_url = create_pg_database("stage_e_19a_catalog")
    dagster_url = create_pg_database("stage_e_19a_dagster", migrate=False)
    server = ImageServer(tmp_path / "corpus")
    stacks: list[Stack] = []
    try:
        engine = make_engine(catalog_url)
        seed_corpus(engine, tmp_path / "corpus", cards=DRILL_CARDS, seed=19)
        names = serve_over_http(engine, server)
        engine.dispose()
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
            stacks.append(Stack(
                tmp_path / name, catalog_url, tmp_path / "corpus",
                instance_yaml=PROJECT_ROOT / "deploy" / "dagster.postgres.yaml",
                extra_env={"DAGSTER_PG_URL": dagster_url, "STAGE_E_MICRO_BATCH_SIZE": "4"},
            ))
        first, second = stacks
        first.start()
        second.start()  # by mistake: a second daemon on the same instance and catalogue
        instance = first.instance()
        probe = ConcurrencyProbe(instance)
        warned: list[str] = []

        def status_warns() -> bool:
            out = first.stage_e("status").stdout
            # Dagster's heartbeat rows carry both daemons' ids whichever of them wins the ticks.
            if "processes tick dagster-daemon" in out:
                warned.append(out)
            return bool(warned)

        first.wait_until(status_warns, timeout_s=300, what="stage-e status to warn about the second daemon",
                         on_poll=probe)
        first.wait_until(first.idle, timeout_s=900, what="the backlog to drain under two daemons", on_poll=probe)

        fetched = Counter(server.requests)
        assert sorted(fetched) == sorted(names), "a card was never fetched, or something else was"
        twice = {name: n for name, n in fetched.items() if n != 1}
        assert twice == {}, f"cards fetched more than once: {twice}"
        with session_scope(first.engine) as session:
            batches = list(session.execute(sa.select(MicroBatch)).scalars())
            evidence_cards = session.execute(sa.select(sa.func.count(sa.distinct(ImageEvidence.card_id)))).scalar_one()
        assert evidence_cards == DRILL_CARDS
        failed_but_succeeded = [
            b.batch_key for b in batches
            if b.status == "failed" and b.run_id
            and instance.get_run_by_id(b.run_id).status == DagsterRunStatus.SUCCESS  # type: ignore[union-attr]
        ]
        assert failed_but_succeeded == []
        assert_no_duplicates(first.engine)
        assert "warning: 2 processes tick" in warned[0] and "one daemon per instance" in warned[0], warned[0]
        runs = instance.get_runs(RunsFilter(tags={"stage_e/dispatch": "micro-batch"}))
        # How often the mistake bit: a run launched twice, and a run reported failed that then succeeded.
        engine_lines = [
            r.event_log_entry.message or "" for run in runs
            for r in instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ENGINE_EVENT).records
        ]
        relaunched = sum("duplicate run" in m or "started a new run worker" in m for m in engine_lines)
        reported_failed = sum(
            bool(instance.get_records_for_run(run.run_id, of_type=DagsterEventType.RUN_FAILURE).records)
            for run in runs if run.status == DagsterRunStatus.SUCCESS
        )
        print(f"two daemons: {DRILL_CARDS} cards, {len(fetched)} images fetched {sum(fetched.values())} times, "
              f"{len(batches)} batches ({Counter(b.status for b in batches)}), {len(runs)} dispatch runs "
              f"({Counter(r.status.value for r in runs)}), peak {probe.peak} runs started at once, "
              f"{relaunched} second worker(s) of a run, {reported_failed} run(s) reported failed that then succeeded")
    finally:
        for stack in stacks:
            stack.stop()
            stack.engine.dispose()
        server.close()
        drop_pg_database(catalog_url)
        drop_pg_database(dagster_url)


@op
def nothing_much() -> int:
    return 1


@job
def quick_other_job() -> None:
    nothing_much()


# Runs of quick_other_job, in process, on the instance of $DAGSTER_HOME; argv[1] of them.
QUICK_RUNS = (
    "import sys; from dagster import DagsterInstance;"
    "from tests.orchestration.test_fault_drills import quick_other_job;"
    "instance = DagsterInstance.get();"
    "assert all(quick_other_job.execute_in_process(instance=instance).success for _ in range(int(sys.argv[1])))"
)


def _sensor_cursor(instance: DagsterInstance, name: str) -> dict:
    states = [s for s in instance.all_instigator_state() if s.instigator_name == name]
    data = states[0].instigator_data if states else None
    return json.loads(data.cursor) if data is not None and getattr(data, "cursor", None) else {}


@pytest.mark.postgres
def test_the_run_end_cursor_passes_150_other_runs_and_settles_a_sigkilled_run_itself(tmp_path: Path) -> None:
    catalog_url = create_pg_database("stage_e_19a_catalog")
    dagster_url = create_pg_database("stage_e_19a_dagster", migrate=False)
    server = ImageServer(tmp_path / "corpus")
    server.delay_s = 0.6  # slow images so the kill lands mid-batch
    engine = make_engine(catalog_url)
    seed_corpus(engine, tmp_path / "corpus", cards=10, seed=23)
    serve_over_http(engine, server)
    engine.dispose()
    stack = Stack(
        tmp_path, catalog_url, tmp_path / "corpus",
        instance_yaml=PROJECT_ROOT / "deploy" / "dagster.postgres.yaml",
        extra_env={"DAGSTER_PG_URL": dagster_url, "STAGE_E_MICRO_BATCH_SIZE": "5",
                   "STAGE_E_MAX_CONCURRENT_DISPATCHES": "1"},
    )
    try:
        # Only envelope_trip_sensor may settle the kill: the dispatch sensors (whose reconcile settles
        # what the envelope sensor misses) are stopped, and the dispatch run comes from `stage-e sweep`.
        for sensor in ("card_created_sensor", "evidence_changed_sensor"):
            stopped = subprocess.run([str(BIN / "dagster"), "sensor", "stop", sensor, "-w", str(WORKSPACE_YAML)],
                                     env=stack.env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        stack.start()
        instance = stack.instance()
        stack.wait_until(lambda: bool(_sensor_cursor(instance, "envelope_trip_sensor")), timeout_s=180,
                         what="envelope_trip_sensor's first tick")
        began = time.monotonic()
        # Three processes of 50 runs each (execute_in_process wants the main thread): 150 quick run ends.
        quick = [subprocess.Popen([sys.executable, "-c", QUICK_RUNS, "50"], env=stack.env, cwd=PROJECT_ROOT)
                 for _ in range(3)]
        assert [p.wait(timeout=600) for p in quick] == [0, 0, 0]
        quick_s = time.monotonic() - began
        newest = instance.fetch_run_status_changes(DagsterEventType.RUN_SUCCESS, limit=1).records[0].storage_id

        def passed_the_quick_runs() -> bool:
            after = _sensor_cursor(instance, "envelope_trip_sensor").get("after", {})
            return int(after.get(DagsterEventType.RUN_SUCCESS.value, 0)) >= newest

        stack.wait_until(passed_the_quick_runs, timeout_s=180, what="the cursor to pass the 150 quick runs")
        swept = stack.stage_e("sweep")
        assert swept.returncode == 0, swept.stdout + swept.stderr
        victim: dict[str, str] = {}
        stack.wait_until(lambda: run_with_evidence(instance, stack.engine, victim), timeout_s=300,
                         what="a sweep run that has written evidence")
        psutil.Process(int(victim["pid"])).send_signal(signal.SIGKILL)

        def settled() -> bool:
            with session_scope(stack.engine) as session:
                return session.get(MicroBatch, victim["key"]).status == "failed"  # type: ignore[union-attr]

        stack.wait_until(settled, timeout_s=300, what="envelope_trip_sensor to settle the killed run")
        kill = instance.get_records_for_run(victim["run_id"], of_type=DagsterEventType.RUN_FAILURE).records[-1]

        def passed_the_kill() -> bool:
            after = _sensor_cursor(instance, "envelope_trip_sensor").get("after", {})
            return int(after.get(DagsterEventType.RUN_FAILURE.value, 0)) >= kill.storage_id

        stack.wait_until(passed_the_kill, timeout_s=120, what="the cursor to pass the kill's run end")
        with session_scope(stack.engine) as session:
            batch = session.get(MicroBatch, victim["key"])
            assert batch is not None and batch.failure_reason.startswith("run worker died"), batch.failure_reason
            assert session.get(MicroBatch, victim["key"] + "-r2") is not None

        def entry_reported() -> bool:
            return any(e.batch_key == victim["key"] and e.status == "failed" for e in ledger_entries(instance))

        stack.wait_until(entry_reported, timeout_s=120, what="the killed run's ledger entry")
        print(f"150 quick runs of another job ended in {quick_s:.0f} s; the sensor's cursor "
              f"{_sensor_cursor(instance, 'envelope_trip_sensor').get('after')} passed them and settled "
              f"run {victim['run_id'][:8]} of {victim['key']} ({batch.failure_reason[:80]})")
    finally:
        stack.stop()
        stack.engine.dispose()
        server.close()
        drop_pg_database(catalog_url)
        drop_pg_database(dagster_url)
