"""``retention_sensor``: keeps the partition count and the fetch-outcome table bounded, by itself.

Each tick looks at no more than ``BATCHES_PER_TICK`` finished batches older than
``STAGE_E_RETENTION_DAYS``: those whose partition still exists get a delete request, those whose
partition is already gone lose their catalogue row, so a batch takes two ticks and a failed
tick never orphans a partition. Abandoned batches lose their partition sooner, a minute after no
run of theirs is going (``defs.abandoned``; the cursor is where that pass goes on). It ticks
every minute so that a steady tick holds only the minute's newly expired batches, while a
backlog clears at 250 batches a minute (360,000 a day),
ten times what dispatch finishes at the default cap (two runs per five-second tick, ~35,000 a day),
so a busy week past the cutoff is gone within a day.
"""

from __future__ import annotations

from datetime import timedelta

from dagster import DefaultSensorStatus, SensorEvaluationContext, SensorResult, sensor

from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...dispatch.guard import FLAG_OFF
from ...envelope.fetch_window import prune_fetch_outcomes
from ..abandoned import abandoned_partitions, dump_cursor, load_cursor
from ..heartbeat import beat
from ..partitions import micro_batches
from ..retention import expired_batches, forget_batches
from ..sensor_context import sensor_instance, sensor_resource

BATCHES_PER_TICK = 500
INTERVAL_S = 60
# Outcomes kept, in failure windows: room for the window's rules to change without losing history.
FETCH_WINDOWS_KEPT = 2


@sensor(
    minimum_interval_seconds=INTERVAL_S,
    default_status=DefaultSensorStatus.RUNNING,
    description="Deletes finished micro-batches past STAGE_E_RETENTION_DAYS (partition, then row), old fetch outcomes.",
)
def retention_sensor(context: SensorEvaluationContext) -> SensorResult:
    stage_e = sensor_resource(context)
    beat(context, stage_e, sensor_name="retention_sensor", interval_s=INTERVAL_S)
    settings = stage_e.settings()
    if not settings.streaming_enabled:
        return SensorResult(skip_reason=FLAG_OFF)
    keep = FETCH_WINDOWS_KEPT * settings.fetch_failure_window
    cutoff = utcnow() - timedelta(days=settings.retention_days)
    instance = sensor_instance(context)
    with session_scope(stage_e.engine()) as session:
        expired = expired_batches(session, instance, finished_before=cutoff, limit=BATCHES_PER_TICK)
        forgotten = forget_batches(session, expired.unpartitioned)
        pruned = prune_fetch_outcomes(session, keep)
        abandoned = abandoned_partitions(
            session, instance, after=load_cursor(context.cursor), now=utcnow(), limit=BATCHES_PER_TICK,
            grace=timedelta(seconds=settings.abandoned_grace_s),
        )
    summary = (
        f"finished batches older than {settings.retention_days} day(s): "
        f"requested deletion of {len(expired.partitioned)} partition(s), "
        f"deleted {forgotten} batch row(s) whose partition was gone; "
        f"pruned {pruned} fetch outcome(s) (kept the newest {keep}); "
        f"requested deletion of {len(abandoned.delete)} abandoned batch partition(s)"
    )
    doomed = list(dict.fromkeys(expired.partitioned + abandoned.delete))
    requests = [micro_batches.build_delete_request(doomed)] if doomed else []
    return SensorResult(skip_reason=summary, dynamic_partitions_requests=requests, cursor=dump_cursor(abandoned.cursor))
