"""Trips: recording a crossed bar, the global open-trip check, and the one path that closes a trip."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.base import utcnow
from ..catalog.engine import dialect_insert
from ..catalog.give_back import give_back
from ..catalog.models import TRIP_BARS, EnvelopeTrip, FetchOutcome
from .bars import FAILURE_BARS, Ceilings, EnvelopeSignals, first_breach


class TripError(Exception):
    """A trip operation was refused."""


class TripNotFound(TripError):
    pass


class TripAlreadyAcknowledged(TripError):
    pass


class EmptyNote(TripError):
    pass


def new_trip_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S")
    return f"envtrip-{stamp}-{secrets.token_hex(4)}"


MANUAL_BAR = "manual"
_OPEN_PER_BAR = sa.text("acknowledged_at IS NULL AND bar <> 'manual'")


def open_trip(session: Session, bar: str, detail: dict[str, Any], *, run_id: str | None = None) -> EnvelopeTrip:
    """Record an open trip in the caller's transaction, or return the one already open for ``bar``.

    An automatic bar has at most one open trip (a partial unique index), so two runs meeting the
    same lockout at once open one trip and one acknowledgement resumes; the insert is a
    compare-and-set, not a read-then-write. Manual trips are each their own.
    """
    if bar not in TRIP_BARS:
        raise ValueError(f"unknown bar {bar!r}; expected one of {TRIP_BARS}")
    trip_id = new_trip_id()
    values = {"trip_id": trip_id, "bar": bar, "detail": detail, "run_id": run_id, "tripped_at": utcnow()}
    if bar == MANUAL_BAR:
        session.execute(sa.insert(EnvelopeTrip).values(**values))
    else:
        insert = dialect_insert(session)(EnvelopeTrip)
        session.execute(
            insert.values(**values).on_conflict_do_nothing(index_elements=["bar"], index_where=_OPEN_PER_BAR)
        )
    return session.execute(
        sa.select(EnvelopeTrip)
        .where(EnvelopeTrip.bar == bar, EnvelopeTrip.acknowledged_at.is_(None))
        .order_by(EnvelopeTrip.id.desc())
        .limit(1)
        if bar != MANUAL_BAR
        else sa.select(EnvelopeTrip).where(EnvelopeTrip.trip_id == trip_id)
    ).scalar_one()


def check_envelope(
    session: Session, signals: EnvelopeSignals, ceilings: Ceilings, *, run_id: str | None = None
) -> EnvelopeTrip | None:
    """Open a trip for the first bar the signals cross; ``None`` when every bar holds."""
    breach = first_breach(signals, ceilings)
    if breach is None:
        return None
    return open_trip(session, breach.bar, breach.detail(signals), run_id=run_id)


def current_open_trip(session: Session) -> EnvelopeTrip | None:
    """The newest unacknowledged trip of any run, or ``None``. Global on purpose: any open trip halts all."""
    return session.execute(
        sa.select(EnvelopeTrip)
        .where(EnvelopeTrip.acknowledged_at.is_(None))
        .order_by(EnvelopeTrip.tripped_at.desc(), EnvelopeTrip.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def trip_opened_by_run(session: Session, run_id: str, *, bar: str) -> EnvelopeTrip | None:
    """The trip of ``bar`` that run ``run_id`` opened, if any."""
    return session.execute(
        sa.select(EnvelopeTrip).where(EnvelopeTrip.run_id == run_id, EnvelopeTrip.bar == bar).limit(1)
    ).scalar_one_or_none()


def list_trips(session: Session, *, open_only: bool = False, limit: int = 100) -> Sequence[EnvelopeTrip]:
    query = sa.select(EnvelopeTrip).order_by(EnvelopeTrip.tripped_at.desc(), EnvelopeTrip.id.desc()).limit(limit)
    if open_only:
        query = query.where(EnvelopeTrip.acknowledged_at.is_(None))
    return session.execute(query).scalars().all()


def acknowledge_trip(session: Session, trip_id: str, *, note: str, by: str) -> EnvelopeTrip:
    """Close one trip on a person's word. The only code path that clears a trip.

    The trip of a failure that must not hide (``FAILURE_BARS``) is acknowledged once its cause is
    fixed, so the cards those failures set aside (parked, or read with an extractor error) go back to
    the backlog in the same transaction; the trip's detail says how many (``given_back``)."""
    if not note or not note.strip():
        raise EmptyNote("acknowledging a trip needs a non-empty --note")
    trip = session.execute(
        sa.select(EnvelopeTrip).where(EnvelopeTrip.trip_id == trip_id).with_for_update()
    ).scalar_one_or_none()
    if trip is None:
        raise TripNotFound(f"no trip with id {trip_id!r}")
    if trip.acknowledged_at is not None:
        raise TripAlreadyAcknowledged(
            f"trip {trip_id} was already acknowledged at {trip.acknowledged_at:%Y-%m-%d %H:%M:%S} UTC "
            f"by {trip.acknowledged_by}"
        )
    trip.acknowledged_at = utcnow()
    trip.acknowledged_by = by
    trip.acknowledged_note = note.strip()
    # What tripped the bar before the ack no longer counts: only outcomes after it fill the window.
    trip.window_floor_id = session.execute(sa.select(sa.func.max(FetchOutcome.id))).scalar_one_or_none() or 0
    if trip.bar in FAILURE_BARS:
        trip.detail = {**(trip.detail or {}), "given_back": give_back(session).as_detail()}
    session.flush()
    return trip
