"""``acknowledge_trip``: a person acknowledges a trip from the launchpad, through the same function as
``stage-e trips ack`` (``envelope.trips.acknowledge_trip``).

A run launched by automation (a sensor, a schedule, a backfill, an automation condition, the
retry daemon) refuses before touching the catalogue: only a person may resume dispatch. Who
acknowledged is the run's user tag when the deployment sets one, else the run id.
"""

from dagster import Config, Failure, OpExecutionContext, Output, RunConfig, in_process_executor, job, op
from pydantic import Field

from ..catalog.engine import session_scope
from ..envelope.trips import EmptyNote, TripAlreadyAcknowledged, TripError, TripNotFound, acknowledge_trip
from .checks import trip_verdict
from .launchpad import ACK_JOB, ACK_OP, EXAMPLE_NOTE, EXAMPLE_TRIP_ID
from .resources import StageEResource

# Run tags Dagster sets on runs that automation launched (dagster/_core/storage/tags.py names them).
AUTOMATION_TAGS = {
    "dagster/sensor_name": "a sensor",
    "dagster/schedule_name": "a schedule",
    "dagster/backfill": "a backfill",
    "dagster/parent_backfill_id": "a backfill",
    "dagster/root_backfill_id": "a backfill",
    "dagster/from_automation_condition": "an automation condition",
    "dagster/auto_materialize": "auto-materialize",
    "dagster/retry_number": "the run retry daemon",
}
# Where a deployment records who launched a run: ``dagster/user``, or ``user`` (Dagster+).
USER_TAGS = ("dagster/user", "user")
BY_MAX_CHARS = 120  # envelope_trips.acknowledged_by

ACKNOWLEDGED = "acknowledged"
REFUSED_AUTOMATION = "refused_automation"
OUTCOME_OF_ERROR: dict[type[TripError], str] = {
    TripNotFound: "trip_not_found",
    TripAlreadyAcknowledged: "already_acknowledged",
    EmptyNote: "empty_note",
}


class AckConfig(Config):
    """What the launchpad asks for; both fields are required."""

    trip_id: str = Field(
        description="The trip to acknowledge, as `stage-e trips list` or the check no_open_trip names it."
    )
    note: str = Field(description="What was checked or fixed; stored with the acknowledgement.")


def automation_launcher(tags: dict[str, str]) -> str | None:
    """What automation launched a run with these tags, or ``None`` when nothing says so."""
    for tag, launcher in AUTOMATION_TAGS.items():
        if tags.get(tag):
            return f"{launcher} ({tag}={tags[tag]})"
    return None


def acknowledger(tags: dict[str, str], run_id: str) -> str:
    for tag in USER_TAGS:
        if tags.get(tag, "").strip():
            return tags[tag].strip()[:BY_MAX_CHARS]
    return f"run {run_id}"


@op(name=ACK_OP, description="Acknowledge one trip on a person's word; refuses when automation launched the run.")
def acknowledge_trip_op(context: OpExecutionContext, config: AckConfig, stage_e: StageEResource) -> Output[str]:
    tags = dict(context.run.tags)
    launcher = automation_launcher(tags)
    if launcher is not None:
        raise Failure(
            description=f"refused: this run was launched by {launcher}; only a person may acknowledge a trip. "
            f"Trip {config.trip_id} is unchanged.",
            metadata={"ack_outcome": REFUSED_AUTOMATION, "trip_id": config.trip_id},
            allow_retries=False,
        )
    by = acknowledger(tags, context.run.run_id)
    engine = stage_e.engine()
    try:
        with session_scope(engine) as session:
            trip = acknowledge_trip(session, config.trip_id, note=config.note, by=by)
            bar, tripped_at = trip.bar, trip.tripped_at
            given = dict((trip.detail or {}).get("given_back") or {})
    except TripError as exc:
        outcome = OUTCOME_OF_ERROR.get(type(exc), "refused")
        raise Failure(
            description=f"{outcome}: {exc}; nothing was changed.",
            metadata={"ack_outcome": outcome, "trip_id": config.trip_id},
            allow_retries=False,
        ) from None
    with session_scope(engine) as session:
        verdict = trip_verdict(session)
    # The check turns green now, not at the sensor's next tick (or names the trips still open).
    context.instance.report_runless_asset_event(verdict.evaluation())
    context.log.info(
        f"acknowledged {config.trip_id} (bar {bar}, tripped {tripped_at:%Y-%m-%d %H:%M:%S} UTC) by {by}; "
        + ("dispatch resumes at the next sensor tick" if verdict.passed else f"still open: {verdict.description}")
        + (f"; given back to the Stage C backlog: {given['parked_cards']} parked card(s), "
           f"{given['extractor_error_cards']} card(s) read with an extractor error" if given else "")
    )
    return Output(
        config.trip_id,
        metadata={
            "ack_outcome": ACKNOWLEDGED,
            "trip_id": config.trip_id,
            "bar": bar,
            "acknowledged_by": by,
            "note": config.note.strip(),
            "open_trips_left": int(verdict.metadata.get("open_trips", 0)),
            **{key: int(count) for key, count in given.items()},
        },
    )


@job(
    name=ACK_JOB,
    executor_def=in_process_executor,
    tags={"dagster/max_retries": "0"},
    # What the launchpad shows instead of `{}`: the fields to fill. Launched as it stands it refuses
    # (empty_note) and its id names no trip. The check no_open_trip links here with the open trip's id.
    config=RunConfig(ops={ACK_OP: AckConfig(trip_id=EXAMPLE_TRIP_ID, note=EXAMPLE_NOTE)}),
    description="Acknowledge an envelope trip from the launchpad (config: trip_id, note). "
    "The same acknowledgement as `stage-e trips ack`; refuses when launched by a sensor, schedule or backfill.",
)
def acknowledge_trip_job() -> None:
    acknowledge_trip_op()
