"""Telling a run the run monitor cancelled for its ``dagster/max_runtime`` from one a person cancelled.

Dagster ends both CANCELED; only the monitor's RUN_CANCELING event says why. A person's cancel
costs a batch nothing, but a run that outlived its max runtime spends an attempt, so a card that
hangs Stage C is parked in the end instead of being dispatched again for ever.
"""

from __future__ import annotations

from dagster import DagsterEventType, DagsterInstance

# The start of the message ``check_run_timeout`` in Dagster's run monitor gives the cancel.
_MONITOR_CANCEL = "Canceling due to exceeding maximum runtime"


def max_runtime_exceeded(instance: DagsterInstance, run_id: str) -> str | None:
    """Why the run monitor cancelled the run (``"run exceeded its max runtime: ..."``), else None."""
    records = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.RUN_CANCELING, limit=1, ascending=False
    ).records
    event = records[0].event_log_entry.dagster_event if records else None
    message = (event.message or "").strip() if event is not None else ""
    return f"run exceeded its max runtime: {message}" if message.startswith(_MONITOR_CANCEL) else None
