"""The signals of failures that must not hide, read from the catalogue every process shares.

Two of them. Batches failed for one cause with none finishing cleanly in between: a model that cannot
load or run fails every batch the same way, where a bad card fails one. And the cards read whose extractor
raised, among the newest cards read (each card's fetch outcome says so): an extractor that breaks on
most cards would otherwise leave them done with a hole in their evidence. Both count only what
happened after the newest acknowledgement, so an ack always resumes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import EnvelopeTrip, FetchOutcome, MicroBatch

# Batch statuses that end a batch with its work done; one finishing after a failure ends the streak.
FINISHED_CLEAN = ("succeeded", "stopped")
# Run ids, keys, hashes, pids and counts differ from one failure to the next; the cause does not.
_VARYING = re.compile(r"\b[0-9a-f]{8,}(?:-[0-9a-f]{4,})*\b|\d+", re.IGNORECASE)
MAX_CAUSE_CHARS = 300


def cause_of(reason: str) -> str:
    """A failure reason with what varies between runs (ids, hashes, numbers) masked: two batches failed
    for one cause when these are equal."""
    return _VARYING.sub("#", " ".join(reason.split()))[:MAX_CAUSE_CHARS]


@dataclass(frozen=True)
class FailedBatchStreak:
    """``length`` batches failed for one cause since the last clean finish; ``reason`` is the newest of
    them's failure reason as recorded, ``batch_keys`` those batches, newest first."""

    length: int
    reason: str | None = None
    batch_keys: tuple[str, ...] = ()


# Failures read per sample, as a multiple of the streak that trips: a few failures of other causes
# among them (a worker killed once) neither count nor hide the one that repeats.
READ_PER_STREAK = 4


def last_ack_at(session: Session) -> datetime | None:
    """When the newest acknowledgement was made: what failed before it no longer counts."""
    return session.execute(sa.select(sa.func.max(EnvelopeTrip.acknowledged_at))).scalar_one_or_none()


def failed_batch_streak(session: Session, *, longest: int) -> FailedBatchStreak:
    """The most batches failed for one cause (the newest such cause on a tie) since the last clean
    finish and the last ack, counted up to ``longest``: failing in a row means no batch finished
    cleanly (``succeeded`` or ``stopped``) in between. Failures of other causes neither count nor
    break it, nor do abandoned batches (refused, cancelled). Reads at most ``READ_PER_STREAK x
    longest`` failed rows and the newest clean finish per status through the ``(status,
    finished_at)`` index."""
    floors = [last_ack_at(session)] + [
        session.execute(
            sa.select(sa.func.max(MicroBatch.finished_at)).where(MicroBatch.status == status)
        ).scalar_one_or_none()
        for status in FINISHED_CLEAN
    ]
    floor = max((t for t in floors if t is not None), default=None)
    failed = sa.select(MicroBatch.batch_key, MicroBatch.failure_reason).where(
        MicroBatch.status == "failed", MicroBatch.finished_at.is_not(None)
    )
    if floor is not None:
        failed = failed.where(MicroBatch.finished_at > floor)
    rows = session.execute(failed.order_by(MicroBatch.finished_at.desc()).limit(READ_PER_STREAK * longest)).all()
    by_cause: dict[str, list[tuple[str, str]]] = {}
    for key, reason in rows:  # newest first, so each cause's list is too, and dicts keep first-seen order
        by_cause.setdefault(cause_of(reason or ""), []).append((key, reason or ""))
    if not by_cause:
        return FailedBatchStreak(0)
    repeated = max(by_cause.values(), key=len)  # on a tie, the cause seen first: the newest
    keys = tuple(key for key, _ in repeated[:longest])
    return FailedBatchStreak(len(keys), repeated[0][1], keys)


@dataclass(frozen=True)
class ExtractorErrorCounts:
    errors: int
    read: int
    cause: str | None = None  # the commonest error among them, as the newest card of it recorded it


def extractor_error_counts(session: Session, window: int) -> ExtractorErrorCounts:
    """Among the newest ``window`` cards read (fetch outcome ``ok``) since the last ack, all processes
    together, those whose extractor raised, and the commonest of their errors."""
    floor = session.execute(sa.select(sa.func.max(EnvelopeTrip.window_floor_id))).scalar_one_or_none() or 0
    rows = session.execute(
        sa.select(FetchOutcome.extractor_error)
        .where(FetchOutcome.id > floor, FetchOutcome.outcome == "ok")
        .order_by(FetchOutcome.id.desc())
        .limit(window)
    ).scalars().all()
    errors = Counter(cause_of(text) for text in rows if text)
    if not errors:
        return ExtractorErrorCounts(errors=0, read=len(rows))
    commonest = errors.most_common(1)[0][0]
    newest_text = next(text for text in rows if text and cause_of(text) == commonest)
    return ExtractorErrorCounts(errors=sum(errors.values()), read=len(rows), cause=newest_text)
