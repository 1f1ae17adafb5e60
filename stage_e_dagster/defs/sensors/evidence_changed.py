"""``evidence_changed_sensor``: cards whose current evidence is newer than their last Stage D pass.

Whoever wrote the evidence: a person, BULK, or a dispatch run whose Stage D never ran (its retry
was cancelled during a trip, a person cancelled it, the batch was parked). A card still held by a
live batch is not eligible, which is what keeps the dispatcher's own writes from echoing.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SensorResult, SkipReason, sensor

from ...catalog.backlog import STAGE_D_PENDING
from ..heartbeat import beat
from ..jobs import stage_e_dispatch
from ..sensor_context import sensor_resource
from .dispatching import EVERY_DAEMON_PASS_S, dispatch_tick

INTERVAL_S = EVERY_DAEMON_PASS_S


@sensor(
    job=stage_e_dispatch,
    minimum_interval_seconds=INTERVAL_S,
    default_status=DefaultSensorStatus.RUNNING,
    description="Runs Stage D again for unclaimed cards whose evidence changed since their last Stage D pass.",
)
def evidence_changed_sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
    stage_e = sensor_resource(context)
    beat(context, stage_e, sensor_name="evidence_changed_sensor", interval_s=INTERVAL_S)
    return dispatch_tick(
        context,
        stage_e,
        predicate=STAGE_D_PENDING,
        trigger_reason="evidence-change",
        owns_reconcile=False,
        use_cursor=False,
    )
