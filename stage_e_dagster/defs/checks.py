"""Asset checks: the envelope is red while a trip is open, and a Stage C batch with losses is not plain green.

``no_open_trip`` is evaluated by ``envelope_trip_sensor`` whenever its answer changes (a runless
check evaluation), by the acknowledge job right after an ack, and on demand from the UI (Execute).
All three build it from :func:`trip_verdict`, so they cannot disagree. ``stage_c_batch_clean`` is
returned by ``stage_c_evidence`` itself with the batch's ledger figures.
"""

from dataclasses import dataclass, field
from typing import Any, Mapping

import sqlalchemy as sa
from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    asset_check,
)
from sqlalchemy.orm import Session

from ..catalog.engine import session_scope
from ..catalog.models import EnvelopeTrip
from ..envelope.trips import list_trips
from .envelope_asset import ENVELOPE_KEY
from .launchpad import ack_launchpad_path
from .resources import StageEResource

NO_OPEN_TRIP = "no_open_trip"
STAGE_C_BATCH_CLEAN = "stage_c_batch_clean"
# Open trips named in one verdict; more than this are counted, not listed.
TRIPS_NAMED = 5


def ack_command(trip_id: str) -> str:
    return f'stage-e trips ack {trip_id} --note "what was checked or fixed"'


@dataclass(frozen=True)
class TripVerdict:
    """The answer of ``no_open_trip``: passed, why, and the trips it names (newest first)."""

    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)
    open_trip_ids: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """A short token that changes whenever the verdict does (the sensor keeps it in its cursor)."""
        return "open:" + ",".join(self.open_trip_ids) if self.open_trip_ids else "clear"

    def evaluation(self) -> AssetCheckEvaluation:
        return AssetCheckEvaluation(
            asset_key=ENVELOPE_KEY,
            check_name=NO_OPEN_TRIP,
            passed=self.passed,
            severity=AssetCheckSeverity.ERROR,
            description=self.description,
            metadata=self.metadata,
        )

    def result(self) -> AssetCheckResult:
        return AssetCheckResult(
            passed=self.passed, severity=AssetCheckSeverity.ERROR, description=self.description, metadata=self.metadata
        )


def _reading(detail: Mapping[str, Any] | None) -> str:
    detail = detail or {}
    if "observed" in detail:
        cause = f"; cause: {detail['cause']}" if detail.get("cause") else ""
        return f"observed {detail['observed']} over ceiling {detail.get('ceiling')}{cause}"
    return str(detail.get("note") or "no reading recorded")


def trip_verdict(session: Session) -> TripVerdict:
    """Failed while any trip is open (global, like the dispatch gate), naming the newest trip, its bar and the ack."""
    trips = list_trips(session, open_only=True, limit=TRIPS_NAMED)
    if not trips:
        return TripVerdict(True, "no open trip: dispatch may run", {"open_trips": 0})
    newest = trips[0]
    total = len(trips)
    if total == TRIPS_NAMED:  # there may be more than the named ones
        total = session.execute(
            sa.select(sa.func.count()).select_from(EnvelopeTrip).where(EnvelopeTrip.acknowledged_at.is_(None))
        ).scalar_one()
    others = [t.trip_id for t in trips[1:]]
    description = (
        f"trip {newest.trip_id} open on bar {newest.bar} ({_reading(newest.detail)}) since "
        f"{newest.tripped_at:%Y-%m-%d %H:%M:%S} UTC: all new dispatch is halted. Acknowledge it with "
        f"`{ack_command(newest.trip_id)}` or from the launchpad that ack_launchpad links to (the trip id is filled in)."
    )
    if others:
        description += f" Also open: {', '.join(others)}" + (" and more." if total > len(trips) else ".")
    metadata = {
        "trip_id": newest.trip_id,
        "bar": newest.bar,
        "cause": str((newest.detail or {}).get("cause") or ""),
        "tripped_at": newest.tripped_at.isoformat(),
        "ack_command": ack_command(newest.trip_id),
        "ack_launchpad": MetadataValue.url(ack_launchpad_path(newest.trip_id)),
        "open_trips": total,
        "open_trip_ids": ", ".join(t.trip_id for t in trips),
    }
    return TripVerdict(False, description, metadata, tuple(t.trip_id for t in trips))


@asset_check(
    asset=ENVELOPE_KEY,
    name=NO_OPEN_TRIP,
    blocking=False,
    description="Fails (error) while any envelope trip is open, naming the trip, its bar and the ack command.",
)
def no_open_trip(stage_e: StageEResource) -> AssetCheckResult:
    with session_scope(stage_e.engine()) as session:
        return trip_verdict(session).result()


stage_c_batch_clean_spec = AssetCheckSpec(
    name=STAGE_C_BATCH_CLEAN,
    asset="stage_c_evidence",
    description="Warns when the batch had host fetch failures, terminal records, extractor errors or a lockout: "
    "not plain green.",
)


def stage_c_batch_check(row: Mapping[str, Any]) -> AssetCheckResult:
    """The per-batch warning from a Stage C ledger row (``dispatch.batch_rows.stage_c_row``)."""
    failures = int(row.get("stage_c_fetch_failures", 0))
    terminal = int(row.get("stage_c_terminal", 0))
    lockout = str(row.get("lockout_trip_id") or "")
    extractor_errors = int(row.get("stage_c_extractor_errors", 0))
    problems = []
    if failures:
        problems.append(f"{failures} host fetch failure(s)")
    if terminal:
        problems.append(f"{terminal} card(s) left with a terminal record")
    if extractor_errors:
        problems.append(f"{extractor_errors} card(s) read with an extractor that raised (extractor-error; "
                        "the tracebacks are in the run's log)")
    if lockout:
        problems.append(f"image host lockout (trip {lockout}), Stage C stopped early")
    return AssetCheckResult(
        check_name=STAGE_C_BATCH_CLEAN,
        asset_key=AssetKey("stage_c_evidence"),
        passed=not problems,
        severity=AssetCheckSeverity.WARN,
        description="; ".join(problems) if problems else "every card fetched and evidenced",
        metadata={
            "stage_c_fetch_failures": failures,
            "stage_c_terminal": terminal,
            "stage_c_rejected": int(row.get("stage_c_rejected", 0)),
            "stage_c_throttled": int(row.get("stage_c_throttled", 0)),
            "stage_c_extractor_errors": extractor_errors,
            "lockout_trip_id": lockout,
        },
    )
