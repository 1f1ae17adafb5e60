"""The one definition of "current evidence", shared by Stage C selection and Stage D.

Evidence is current for a card when it was taken from the card's present image (its
``content_hash`` equals the card's) and every manifest extractor ran at its current version.
"""

from __future__ import annotations

from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import Card, ImageEvidence
from .manifest import stale_extractors


def present_evidence(session: Session, card_ids: Iterable[int]) -> dict[int, ImageEvidence]:
    """Each card's evidence row for its present image, current or stale; cards without one are absent."""
    ids = list(card_ids)
    if not ids:
        return {}
    rows = session.execute(
        sa.select(ImageEvidence)
        .join(Card, sa.and_(Card.id == ImageEvidence.card_id, Card.content_hash == ImageEvidence.content_hash))
        .where(ImageEvidence.card_id.in_(ids))
    ).scalars()
    return {row.card_id: row for row in rows}


def current_evidence(session: Session, card_ids: Iterable[int]) -> dict[int, ImageEvidence]:
    """Each card's current evidence; cards without current evidence are absent from the result."""
    return {
        card_id: ev
        for card_id, ev in present_evidence(session, card_ids).items()
        if not stale_extractors(ev.extractor_versions)
    }


def satisfies_stage_c(evidence: ImageEvidence | None) -> bool:
    """Stage C has nothing to do for this present-image row: it is current, or it is a terminal
    record (a failed fetch or undecodable image waits for the image to change, not for a version bump)."""
    return evidence is not None and (evidence.terminal or not stale_extractors(evidence.extractor_versions))
