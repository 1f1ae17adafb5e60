"""Dispatch runs Dagster created and never started: failed once older than a bound, so their batch is
requested again and their place in the queue comes back.

A run is NOT_STARTED between its creation and its hand-over to the run queue (a sensor's request, a
backfill's submission). When the hand-over fails and recording that failure fails too, Dagster leaves
it there; its run monitor fails such a run only while ``run_monitoring`` is enabled, and never looks at
a MANAGED run (created for an executor outside Dagster) at all. The project counts both as going, so
left alone such a run would renew its batch's lease for ever, hold a queue place and keep a sweep's
backfill from finishing. The bound is the instance's own ``run_monitoring: start_timeout_seconds``
(Dagster's default 180 s when it is 0 or unset), the same one Dagster's monitor applies, so the two agree.
Once failed, the run ends like any run that failed before it took its batch (``dispatch.lifecycle``):
the batch is requested again under a new run key, its attempt unspent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dagster import DagsterInstance

from . import dagster_internals
from .run_queue import is_dispatch_run

# What the bound is when the instance turns Dagster's own start check off (``start_timeout_seconds: 0``).
DEFAULT_START_BOUND_S = 180


def start_bound_s(instance: DagsterInstance) -> int:
    configured = dagster_internals.run_start_timeout_s(instance)
    return configured if configured > 0 else DEFAULT_START_BOUND_S


def fail_unstarted_runs(instance: DagsterInstance, *, now: datetime) -> list[str]:
    """Fail every dispatch run still unstarted ``start_bound_s`` after its creation; a note for each."""
    bound = start_bound_s(instance)
    notes = []
    for run in dagster_internals.unstarted_runs(instance, created_before=now - timedelta(seconds=bound)):
        if not is_dispatch_run(run):
            continue
        message = (f"Run was still {run.status.value} {bound} s after it was created: Dagster never handed it to "
                   "the run queue or a launcher. stage-e failed it so its batch is requested again.")
        if dagster_internals.fail_unstarted_run(instance, run.run_id, message):
            notes.append(f"run {run.run_id[:8]} never started ({run.status.value} over {bound} s): failed, "
                         "its batch is requested again")
    return notes
