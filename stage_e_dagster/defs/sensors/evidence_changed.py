"""``evidence_changed_sensor``: evidence written by anyone but the dispatcher sends its card back through Stage D.

The dispatcher's own writes carry ``dispatch:<run>`` as writer and are cleared by the same
run's Stage D, so they never echo.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SensorResult, SkipReason, sensor

from ...dispatch.batches import EXTERNAL_EVIDENCE_CHANGED
from ..jobs import stage_e_dispatch
from ..resources import StageEResource
from .dispatching import dispatch_tick


@sensor(
    job=stage_e_dispatch,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Re-runs Stage D for cards whose evidence someone other than the dispatcher changed.",
)
def evidence_changed_sensor(context: SensorEvaluationContext, stage_e: StageEResource) -> SensorResult | SkipReason:
    return dispatch_tick(
        context, stage_e, predicate=EXTERNAL_EVIDENCE_CHANGED, trigger_reason="evidence-change", use_cursor=False
    )
