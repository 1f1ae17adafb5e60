"""Run tags shared by the sensors, the sweep and the run-end sensor."""

from __future__ import annotations

from ..settings import Settings

DISPATCH_POOL = "stage_e_dispatch"
DISPATCH_TAG = "stage_e/dispatch"  # on every dispatch run, sensor-launched or backfill
TRIGGER_TAG = "stage_e/trigger_reason"
ATTEMPT_TAG = "stage_e/attempt"
PARTITION_TAG = "dagster/partition"
BACKFILL_TAG = "dagster/backfill"  # Dagster's, on every run a backfill launched
MAX_RUNTIME_TAG = "dagster/max_runtime"  # Dagster's: run monitoring cancels a run older than this (seconds)
# Set by a run that refused (see ``dispatch.conveyor``): why, so the run-end handling knows whether
# the batch is its to put back.
REFUSED_TAG = "stage_e/refused"
REFUSED_REASON_TAG = "stage_e/refused_reason"
# A sweep's run a trip refused: the trip, so Stage D writes the same 0-card row as Stage C.
REFUSED_TRIP_TAG = "stage_e/refused_trip"


def dispatch_tags(settings: Settings, *, trigger_reason: str, attempt: int | None = None) -> dict[str, str]:
    tags = {
        DISPATCH_TAG: "micro-batch",
        TRIGGER_TAG: trigger_reason,
        MAX_RUNTIME_TAG: str(settings.run_max_runtime_s),
    }
    if attempt is not None:
        tags[ATTEMPT_TAG] = str(attempt)
    return tags
