"""What an acknowledgement of a failure trip gives back: the cards the failures set aside.

A card is set aside two ways while a model or an extractor is broken. Its batch failed on every
attempt, so its claim was moved to ``parked`` for a day; or it was read while an extractor raised, so
its evidence records ``extractor-error`` for that extractor at the current manifest version, which
counts as current and never comes back by itself. Once a person says the cause is fixed (the ack),
both go back to the Stage C backlog, so every card is read again with the fix.

Each change is a compare-and-set on what was read, so a writer that moved on meanwhile wins: the
parked claim is deleted only while it is still ``parked``; an evidence row has the errored
extractors' versions dropped (only those: its other values stand, and only those extractors run
again) only while its version map and skip reasons are still the text that was read, and the card
goes back to the backlog only while it still shows the image that row is of.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .evidence_facts import MANIFEST_VERSIONS
from .models import Card, CardClaim, ImageEvidence
from .models.dispatch import PARKED_KEY

EXTRACTOR_ERROR = "extractor-error"


@dataclass(frozen=True)
class GivenBack:
    parked: int  # parked cards whose claim was released
    extractor_errors: int  # cards put back in the Stage C backlog for their errored extractors

    def as_detail(self) -> dict[str, int]:
        return {"parked_cards": self.parked, "extractor_error_cards": self.extractor_errors}


def release_parked(session: Session) -> int:
    """Every parked card's claim released: its card is in the backlog again (it was never taken out)."""
    return session.execute(sa.delete(CardClaim).where(CardClaim.batch_key == PARKED_KEY)).rowcount or 0


def reopen_extractor_errors(session: Session) -> int:
    """Put back in the Stage C backlog every card whose present evidence records ``extractor-error`` at
    the current version of an extractor; returns how many.

    Reads the whole evidence table once (a text match on the skip reasons; no index serves it), which
    is a person's acknowledgement, not a sensor tick."""
    versions_text = sa.cast(ImageEvidence.extractor_versions, sa.Text)
    skips_text = sa.cast(ImageEvidence.skip_reasons, sa.Text)
    rows = session.execute(
        sa.select(ImageEvidence.id, ImageEvidence.card_id, ImageEvidence.content_hash,
                  ImageEvidence.extractor_versions, ImageEvidence.skip_reasons, versions_text.label("seen_versions"),
                  skips_text.label("seen_skips"))
        .join(Card, sa.and_(Card.id == ImageEvidence.card_id, Card.content_hash == ImageEvidence.content_hash))
        .where(skips_text.like(f"%{EXTRACTOR_ERROR}%"))
    ).all()
    reopened = 0
    for evidence_id, card_id, content_hash, versions, skips, seen_versions, seen_skips in rows:
        versions, skips = versions or {}, skips or {}
        errored = {key for key, why in skips.items()
                   if why == EXTRACTOR_ERROR and versions.get(key) == MANIFEST_VERSIONS.get(key)}
        if not errored:
            continue
        moved = session.execute(
            sa.update(ImageEvidence)
            .where(ImageEvidence.id == evidence_id, versions_text == seen_versions, skips_text == seen_skips)
            .values(extractor_versions={k: v for k, v in versions.items() if k not in errored})
            .execution_options(synchronize_session=False)
        ).rowcount
        if not moved:
            continue
        reopened += session.execute(
            sa.update(Card)
            .where(Card.id == card_id, Card.content_hash == content_hash)
            .values(stage_c_pending=True, updated_at=Card.updated_at)  # not a change of the card
            .execution_options(synchronize_session=False)
        ).rowcount or 0
    return reopened


def give_back(session: Session) -> GivenBack:
    """Both, in the caller's transaction (the acknowledgement's)."""
    return GivenBack(parked=release_parked(session), extractor_errors=reopen_extractor_errors(session))
