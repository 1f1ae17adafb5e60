"""``card_created_sensor``: new cards from any writer, then the rest of the Stage C backlog.

It is also the one place batches in flight are reconciled (renewed, settled, requested again) and
a changed extractor manifest is rolled out, a bounded step per tick. An idle tick watches for new
cards for ``STAGE_E_ARRIVAL_WAIT_S`` before it returns, so a card that lands between the daemon's
passes gets its batch within a quarter second.

The cursor (highest card id requested) only puts the newest cards first. It is not what keeps
cards from being lost: a card whose insert commits after a higher id was seen is still in the
state-based Stage C backlog, which every tick fills from.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SensorResult, SkipReason, sensor

from ...catalog.backlog import STAGE_C_PENDING
from ..heartbeat import beat
from ..jobs import stage_e_dispatch
from ..sensor_context import sensor_resource
from .dispatching import EVERY_DAEMON_PASS_S, dispatch_tick

INTERVAL_S = EVERY_DAEMON_PASS_S


@sensor(
    job=stage_e_dispatch,
    minimum_interval_seconds=INTERVAL_S,
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Batches new cards (then the Stage C backlog) into micro-batch runs and keeps batches in flight honest. "
        "Skips while streaming is off."
    ),
)
def card_created_sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
    stage_e = sensor_resource(context)
    beat(context, stage_e, sensor_name="card_created_sensor", interval_s=INTERVAL_S)
    return dispatch_tick(
        context, stage_e, predicate=STAGE_C_PENDING, trigger_reason="card-created", owns_reconcile=True,
        use_cursor=True, wait_for_arrivals=True,
    )
