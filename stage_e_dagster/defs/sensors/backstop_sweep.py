"""``backstop_sweep_sensor``: once a day, re-find the whole backlog and launch it as one backfill.

Ships stopped; start it in the UI or with ``dagster sensor start backstop_sweep_sensor``.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from ..dagster_internals import repository_asset_graph
from ..heartbeat import beat
from ..sensor_context import sensor_instance, sensor_resource
from ..sweep import SweepRefused, launch_sweep

DAY = 24 * 60 * 60
SWEEP_MAX_BATCHES = 400


@sensor(
    minimum_interval_seconds=DAY,
    default_status=DefaultSensorStatus.STOPPED,
    description="Daily backstop: walks the whole backlog and launches it as one backfill of micro-batches.",
)
def backstop_sweep_sensor(context: SensorEvaluationContext) -> SkipReason:
    stage_e = sensor_resource(context)
    beat(context, stage_e, sensor_name="backstop_sweep_sensor", interval_s=DAY)
    try:
        launch = launch_sweep(sensor_instance(context), repository_asset_graph(context.repository_def),
                              stage_e.settings(),
                              max_batches=SWEEP_MAX_BATCHES)
    except SweepRefused as refused:
        return SkipReason(str(refused))
    if launch.backfill_id is None:
        state = "backlog empty after a full lap" if launch.empty_after_full_lap else "nothing unclaimed to sweep"
        return SkipReason(state)
    return SkipReason(
        f"launched backfill {launch.backfill_id}: {len(launch.batch_keys)} micro-batches, {launch.card_count} cards"
    )
