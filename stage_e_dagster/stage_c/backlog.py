"""The Stage C backlog: reading it in keyset pages, re-raising it after a manifest change, and the
helper writers call when a card's image changes."""

from __future__ import annotations

from typing import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING
from ..catalog.base import utcnow
from ..catalog.models import Card, ImageEvidence
from .manifest import MANIFEST_VERSIONS


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


def _stale_condition() -> sa.ColumnElement[bool]:
    versions = ImageEvidence.extractor_versions
    return sa.or_(*(
        sa.func.coalesce(versions[key].as_string(), "") != version for key, version in MANIFEST_VERSIONS.items()
    ))


def mark_stale_evidence(engine: sa.Engine) -> int:
    """Put back in the backlog every card whose present evidence misses a current extractor version.

    Run after a manifest change. Terminal records (failed fetch, undecodable image) are left alone:
    they come back only when the image changes. Returns the number of cards re-queued.
    """
    stale = (
        sa.select(ImageEvidence.id)
        .where(ImageEvidence.card_id == Card.id, ImageEvidence.content_hash == Card.content_hash,
               ImageEvidence.terminal.is_(False), _stale_condition())
        .exists()
    )
    with engine.begin() as conn:
        result = conn.execute(
            sa.update(Card).where(Card.stage_c_pending.is_(False), stale).values(stage_c_pending=True)
        )
    return int(result.rowcount or 0)


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
