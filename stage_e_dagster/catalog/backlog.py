"""Backlog queries: which cards wait for Stage C or Stage D. Each reads a partial index, never the catalogue."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .models import Card

# Written as "= true" (SQLite: "= 1") on purpose: that is the form each database matches to the
# partial backlog indexes. "IS TRUE" / "IS 1" is not matched, and the query falls back to walking
# the primary key past every finished card.
STAGE_C_PENDING = Card.stage_c_pending == sa.true()
STAGE_D_PENDING = Card.stage_d_pending == sa.true()


def backlog_count(session: Session, predicate: sa.ColumnElement[bool]) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Card).where(predicate)).scalar_one()


def oldest_waiting_since(session: Session) -> datetime | None:
    """When the longest-waiting card in either backlog was created (lowest id first, via the partial indexes)."""
    firsts = [
        session.execute(sa.select(sa.func.min(Card.id)).where(predicate)).scalar_one()
        for predicate in (STAGE_C_PENDING, STAGE_D_PENDING)
    ]
    ids = [i for i in firsts if i is not None]
    if not ids:
        return None
    return session.execute(sa.select(Card.created_at).where(Card.id == min(ids))).scalar_one()
