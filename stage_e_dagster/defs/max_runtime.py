"""Telling a run the run monitor stopped for its ``dagster/max_runtime`` from one a person cancelled.

A person's cancel costs a batch nothing, but a run that outlived its max runtime spends an attempt,
so a card that hangs Stage C is parked in the end instead of being dispatched again for ever.

Dagster writes the stop as several events whose order depends on the launcher and on when the worker
notices: the monitor's RUN_CANCELING with its reason, the launcher's newer generic one, then the
monitor's RUN_FAILURE, or the worker's own RUN_CANCELED first. So the decision reads what Dagster
records as data first, the run record's start and end against the run's max-runtime tag, and only
then every cancel and failure message of the run, never just the newest one.
"""

from __future__ import annotations

from dagster import DagsterEventType, DagsterInstance

from .dagster_internals import run_events

# Dagster's run tag for a run's maximum runtime in seconds, and the older spelling its monitor also reads.
MAX_RUNTIME_TAGS = ("dagster/max_runtime", "dagster/max_runtime_seconds")
# The starts of the messages ``check_run_timeout`` in Dagster's run monitor writes (cancel, then failure).
_MONITOR_MESSAGES = ("Canceling due to exceeding maximum runtime", "Exceeded maximum runtime")


def max_runtime_exceeded(instance: DagsterInstance, run_id: str) -> str | None:
    """Why the run monitor stopped the run (``"run exceeded its max runtime: ..."``), else None."""
    record = instance.get_run_record_by_id(run_id)
    if record is None:
        return None
    limit = _max_runtime_s(record.dagster_run.tags)
    start, end = record.start_time, record.end_time
    if limit is not None and start is not None and end is not None and end - start >= limit:
        return f"run exceeded its max runtime: ran {end - start:.0f} s of a {limit:g} s limit"
    for event_type in (DagsterEventType.RUN_CANCELING, DagsterEventType.RUN_FAILURE):
        for event in run_events(instance, run_id, event_type):
            message = event.message.strip()
            if message.startswith(_MONITOR_MESSAGES):
                return f"run exceeded its max runtime: {message}"
    return None


def _max_runtime_s(tags: dict[str, str]) -> float | None:
    for tag in MAX_RUNTIME_TAGS:
        try:
            return float(tags[tag])
        except (KeyError, ValueError):
            continue
    return None
