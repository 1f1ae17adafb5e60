"""The gate every dispatch passes, in sensors and again inside each run: flag, open trip, fresh sample.

The dispatch sensors read the envelope from the catalogue themselves: the run-status sensor
handles a few runs per tick and can lag, so it is never the only guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from ..envelope.bars import Ceilings
from ..envelope.signals import sample_signals
from ..envelope.trips import check_envelope, current_open_trip
from ..settings import Settings

FLAG_OFF = "streaming is off (STAGE_E_STREAMING_ENABLED=false)"


@dataclass(frozen=True)
class GateVerdict:
    allowed: bool
    reason: str
    trip_id: str | None = None
    new_trip: bool = False


def check_gate(
    session: Session, settings: Settings, *, run_id: str | None = None, rss_mb: float | None = None
) -> GateVerdict:
    """May new dispatch start now? A fresh sample over a bar opens a trip (in the caller's transaction)."""
    if not settings.streaming_enabled:
        return GateVerdict(False, FLAG_OFF)
    trip = current_open_trip(session)
    if trip is not None:
        return GateVerdict(
            False, f"trip {trip.trip_id} ({trip.bar}) is open: dispatch halted until `stage-e trips ack`", trip.trip_id
        )
    ceilings = Ceilings.from_settings(settings)
    signals = sample_signals(session, ceilings, rss_mb=rss_mb)
    trip = check_envelope(session, signals, ceilings, run_id=run_id)
    if trip is not None:
        return GateVerdict(
            False,
            f"envelope sample crossed {trip.bar} ({trip.detail['observed']:g} > {trip.detail['ceiling']:g}): "
            f"opened trip {trip.trip_id}",
            trip.trip_id,
            new_trip=True,
        )
    return GateVerdict(True, "streaming on, no open trip, envelope within bars")
