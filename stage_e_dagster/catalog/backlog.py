"""Backlog queries: which cards wait for Stage C or Stage D, and which wait on configuration (refused by
the settings). Each reads a partial index, never the catalogue."""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

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


# Cards refused by the settings are out of the Stage C backlog, marked with the fingerprint of the
# allow-list they were refused under; a different fingerprint means the settings changed.
CONFIG_REFUSED = Card.config_refused_under.is_not(None)


def requeue_config_refused(session: Session, fingerprint: str, *, limit: int = 1000) -> int:
    """Put back in the Stage C backlog up to ``limit`` cards refused under other settings than
    ``fingerprint``; returns how many. Two ranges around the fingerprint on the partial index, so a
    call costs what it requeues, not the cards still refused under the same settings."""
    other = sa.or_(Card.config_refused_under < fingerprint, Card.config_refused_under > fingerprint)
    ids = list(session.execute(sa.select(Card.id).where(CONFIG_REFUSED, other).limit(limit)).scalars())
    if not ids:
        return 0
    session.execute(
        sa.update(Card)
        .where(Card.id.in_(ids), other)
        .values(stage_c_pending=True, config_refused_under=None, config_refused_setting=None,
                updated_at=Card.updated_at)
        .execution_options(synchronize_session=False)
    )
    return len(ids)


def waiting_on_configuration(session: Session, settings: Sequence[str], *, up_to: int | None = None) -> dict[str, int]:
    """Cards the settings refuse, by the variable in ``settings`` to change (none listed: none waits).
    Each count stops at ``up_to``."""
    found: dict[str, int] = {}
    for setting in settings:
        query = sa.select(Card.id).where(CONFIG_REFUSED, Card.config_refused_setting == setting)
        if up_to is not None:
            query = query.limit(up_to)
        count = session.execute(sa.select(sa.func.count()).select_from(query.subquery())).scalar_one()
        if count:
            found[setting] = count
    return found
