"""What a process on a bigger host gets by default: its dispatch cap, an instance that runs the whole
cap plus the acknowledge job at once, and a sensor tick that can fill every slot.

The CPU count is patched (affinity, no cgroup quota); the instance is the one ``stage-e`` writes into
the state folder, read back by Dagster as the run queue reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from dagster import DagsterInstance

from stage_e_dagster import settings as settings_module
from stage_e_dagster.catalog.backlog import STAGE_C_PENDING
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.defs.instance import dagster_home
from stage_e_dagster.defs.run_queue import dispatch_run_limit
from stage_e_dagster.dispatch.sizing import plan_for_tick
from stage_e_dagster.settings import load_settings

# The acknowledge job a person launches during a trip must never queue behind dispatch runs.
ACK_JOB_RUNS = 1


@pytest.fixture
def sixteen_cpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    no_quota = tmp_path / "cpu.max"
    no_quota.write_text("max 100000\n")
    monkeypatch.setattr(settings_module, "CPU_MAX_FILE", no_quota)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


@pytest.mark.usefixtures("sixteen_cpus")
def test_a_16_cpu_process_runs_its_whole_dispatch_cap_and_the_ack_job_at_once(
    tmp_path: Path, sqlite_engine: sa.Engine
) -> None:
    cfg = load_settings({"STAGE_E_STATE_DIR": str(tmp_path / "state")})
    assert cfg.max_concurrent_dispatches == 16

    with DagsterInstance.from_config(str(dagster_home(cfg))) as instance:
        run_cap = instance.get_concurrency_config().run_queue_config.max_concurrent_runs
        dispatch_runs = dispatch_run_limit(instance)
    assert run_cap == -1 or run_cap >= cfg.max_concurrent_dispatches + ACK_JOB_RUNS, run_cap
    # The run queue's own limit on dispatch runs, which holds while the pool's row is missing, is the cap.
    assert dispatch_runs == cfg.max_concurrent_dispatches

    # Every slot of the cap gets a batch from one tick, not a few ticks' worth.
    with session_scope(sqlite_engine) as session:
        plan = plan_for_tick(cfg, in_flight_runs=0, session=session, predicate=STAGE_C_PENDING, now=utcnow())
    assert plan.max_batches == cfg.max_concurrent_dispatches
