"""The shared fetch-outcome window: the newest N outcomes from every process, read from the catalogue."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import FETCH_OUTCOMES, EnvelopeTrip, FetchOutcome

# Outcomes that count as failures for the fetch-failure-rate bar: the bar measures the image host.
# Throttled (429/503) is recorded but is not a failure; rejected (the upload's own problem: corrupt,
# truncated, empty, oversized or missing) counts only toward the total; lockout has a bar of its own.
# A locator refused by the settings is not fetched, so it records no outcome at all.
FAILURE_OUTCOMES = ("failed",)


@dataclass(frozen=True)
class WindowCounts:
    failures: int
    total: int


def record_fetch_outcome(
    session: Session,
    outcome: str,
    *,
    status_code: int | None = None,
    host: str | None = None,
    card_id: int | None = None,
    run_id: str | None = None,
    extractor_error: str | None = None,
) -> None:
    """Append one outcome (``ok``, ``throttled``, ``failed``, ``rejected`` or ``lockout``) in the caller's
    transaction; ``extractor_error`` says which extractor raised on a card read, and what (its bar is
    ``extractor_errors``, ``envelope.failures``)."""
    if outcome not in FETCH_OUTCOMES:
        raise ValueError(f"unknown fetch outcome {outcome!r}; expected one of {FETCH_OUTCOMES}")
    session.add(FetchOutcome(outcome=outcome, status_code=status_code, host=host, card_id=card_id, run_id=run_id,
                             extractor_error=extractor_error[:300] if extractor_error else None))


def window_counts(session: Session, window: int) -> WindowCounts:
    """Failures and total among the newest ``window`` outcomes, all processes together, counting only
    outcomes recorded after the last acknowledgement (an ack always resumes: old failures cannot trip again)."""
    floor = session.execute(sa.select(sa.func.max(EnvelopeTrip.window_floor_id))).scalar_one_or_none() or 0
    newest = (
        sa.select(FetchOutcome.outcome)
        .where(FetchOutcome.id > floor)
        .order_by(FetchOutcome.id.desc())
        .limit(window)
        .subquery()
    )
    row = session.execute(
        sa.select(
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(sa.case((newest.c.outcome.in_(FAILURE_OUTCOMES), 1), else_=0)), 0),
        ).select_from(newest)
    ).one()
    return WindowCounts(failures=int(row[1]), total=int(row[0]))


def prune_fetch_outcomes(session: Session, keep: int) -> int:
    """Delete all but the newest ``keep`` outcomes so the table stays bounded; returns rows deleted."""
    cutoff = session.execute(
        sa.select(FetchOutcome.id).order_by(FetchOutcome.id.desc()).offset(keep).limit(1)
    ).scalar_one_or_none()
    if cutoff is None:
        return 0
    result = session.execute(sa.delete(FetchOutcome).where(FetchOutcome.id <= cutoff))
    return result.rowcount or 0
