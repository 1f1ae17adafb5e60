"""Rolling a new extractor manifest out to stored evidence, a bounded step at a time.

When the running code's manifest differs from the one last rolled out, each step walks the next
page of evidence rows by id and puts every card whose present, non-terminal evidence misses a
current extractor version back in the Stage C backlog; Stage C then runs only the stale
extractors. No command to remember: the dispatch sensor takes one step per tick until a full walk
is done, and a later manifest change starts a new walk.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.engine import dialect_insert
from ..catalog.models import Card, ImageEvidence, ManifestRollout
from .manifest import MANIFEST_VERSIONS, stale_extractors

ROLLOUT = "stage_c_manifest"
STEP_ROWS = 2000


def manifest_fingerprint() -> str:
    """A short digest of the running code's manifest: a different one means a new rollout."""
    return hashlib.sha256(json.dumps(dict(MANIFEST_VERSIONS), sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class RolloutStep:
    requeued: int
    done: bool
    position: int


def rollout_step(session: Session, *, now: datetime, limit: int = STEP_ROWS) -> RolloutStep:
    """One bounded step of the walk (a no-op once the running manifest is fully rolled out).

    The rollout row is created insert-or-ignore and read ``FOR UPDATE`` (on SQLite the transaction
    already holds the write lock), so two evaluators never walk the same page twice.
    """
    fingerprint = manifest_fingerprint()
    insert = dialect_insert(session)(ManifestRollout)
    session.execute(
        insert.values(
            name=ROLLOUT, manifest=fingerprint, position=0, requeued=0, started_at=now
        ).on_conflict_do_nothing(index_elements=["name"])
    )
    state = session.get(ManifestRollout, ROLLOUT, with_for_update=True, populate_existing=True)
    assert state is not None
    if state.manifest != fingerprint:
        state.manifest, state.position, state.requeued, state.started_at, state.completed_at = (
            fingerprint,
            0,
            0,
            now,
            None,
        )
    if state.completed_at is not None:
        return RolloutStep(requeued=0, done=True, position=state.position)
    rows = session.execute(
        sa.select(ImageEvidence.id, ImageEvidence.card_id, ImageEvidence.extractor_versions)
        .join(Card, sa.and_(Card.id == ImageEvidence.card_id, Card.content_hash == ImageEvidence.content_hash))
        .where(ImageEvidence.id > state.position, ImageEvidence.terminal.is_(False))
        .order_by(ImageEvidence.id)
        .limit(limit)
    ).all()
    stale = [card_id for _, card_id, versions in rows if stale_extractors(versions)]
    requeued = 0
    if stale:
        result = session.execute(
            sa.update(Card)
            .where(Card.id.in_(stale), Card.stage_c_pending.is_(False))
            .values(stage_c_pending=True)
            .execution_options(synchronize_session=False)
        )
        requeued = int(result.rowcount or 0)
    state.requeued += requeued
    if rows:
        state.position = rows[-1][0]
    if len(rows) < limit:
        state.completed_at = now
    session.flush()
    return RolloutStep(requeued=requeued, done=state.completed_at is not None, position=state.position)
