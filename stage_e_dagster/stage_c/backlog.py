"""The Stage C backlog: reading it in keyset pages, and the helper for a writer whose card shows new
bytes under the same locator (a new locator or declared hash needs nothing: a trigger re-queues it)."""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING
from ..catalog.base import utcnow
from ..catalog.models import Card, CardClaim


def backlog_page(session: Session, after_id: int, size: int) -> list[Card]:
    """The next ``size`` pending cards after ``after_id``, by id (reads the partial backlog index)."""
    return list(
        session.execute(
            sa.select(Card).where(STAGE_C_PENDING, Card.id > after_id).order_by(Card.id).limit(size)
        ).scalars()
    )


def cards_by_id(session: Session, card_ids: Sequence[int]) -> dict[int, Card]:
    found: dict[int, Card] = {}
    ids = list(dict.fromkeys(card_ids))
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for card in session.execute(sa.select(Card).where(Card.id.in_(chunk))).scalars():
            found[card.id] = card
    return found


def leased_elsewhere(session: Session, card_ids: Sequence[int], *, now: datetime) -> set[int]:
    """Which of ``card_ids`` a live lease holds (a dispatch batch in flight): not for a BULK pass."""
    if not card_ids:
        return set()
    return set(session.execute(
        sa.select(CardClaim.card_id).where(CardClaim.card_id.in_(list(card_ids)), CardClaim.expires_at > now)
    ).scalars())


def mark_image_changed(session: Session, card_id: int, *, image_locator: str | None = None,
                       declared_content_hash: str | None = None) -> None:
    """For writers: the card now shows a different image. It re-enters the Stage C backlog.

    ``declared_content_hash`` is the new image's sha256 when the source states it; otherwise the
    hash is learned on the next fetch. A new locator may be given at the same time.
    """
    values: dict[str, object] = {
        "content_hash": declared_content_hash, "declared_content_hash": declared_content_hash,
        "stage_c_pending": True, "stage_c_attempts": 0, "updated_at": utcnow(),
    }
    if image_locator is not None:
        values["image_locator"] = image_locator
    session.execute(sa.update(Card).where(Card.id == card_id).values(**values))
