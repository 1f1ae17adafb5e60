"""The ledger outbox: a run end's ledger entry is a catalogue row written in the transaction that
settles its batch, reported by ``envelope_trip_sensor`` and then marked reported.

A tick that raises or times out after settling loses nothing: the compare-and-set that settled the
batch refuses on the next read, but the entry waits here. The tick that emits an entry names it in
its cursor; the next tick marks it reported (a compare-and-set), since only a stored tick's cursor
proves that its events were stored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import LedgerOutbox

# Entries reported per tick; more simply wait for the next tick.
REPORT_PER_TICK = 200
# Reported entries are kept this long (the event log holds them for good), then deleted.
KEEP_REPORTED = timedelta(days=1)


def add_entry(session: Session, *, batch_key: str, run_id: str, entry: dict[str, Any]) -> None:
    """Queue the ledger row of a settled run end, in the caller's (the settling) transaction."""
    session.add(LedgerOutbox(batch_key=batch_key, run_id=run_id, entry=entry))
    session.flush()


def unreported_entries(session: Session, *, limit: int = REPORT_PER_TICK) -> list[LedgerOutbox]:
    """The oldest entries not yet reported, off the partial index of unreported rows."""
    return list(
        session.execute(
            sa.select(LedgerOutbox).where(LedgerOutbox.reported_at.is_(None)).order_by(LedgerOutbox.id).limit(limit)
        ).scalars()
    )


def mark_reported(session: Session, ids: Sequence[int], *, now: datetime) -> int:
    """Entries a stored tick emitted are reported: a compare-and-set, so marking twice is harmless."""
    if not ids:
        return 0
    marked = session.execute(
        sa.update(LedgerOutbox)
        .where(LedgerOutbox.id.in_(list(ids)), LedgerOutbox.reported_at.is_(None))
        .values(reported_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount
    session.execute(sa.delete(LedgerOutbox).where(LedgerOutbox.reported_at < now - KEEP_REPORTED))
    return marked
