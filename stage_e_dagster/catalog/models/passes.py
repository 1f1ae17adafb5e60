"""Stage D pass markers: which calculator has handled which card on which image.

A marker is written (insert-or-ignore) before a calculator writes anything for a card, so it
doubles as a claim: of two concurrent runs over the same card only one goes on to write votes or
scan-log rows, and a re-run on unchanged evidence finds the marker and writes nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at, intpk


class StageDPass(Base):
    """Calculator ``agent_id`` handled the card's image ``content_hash``; ``outcome`` says how."""

    __tablename__ = "stage_d_passes"
    __table_args__ = (sa.UniqueConstraint("card_id", "agent_id", "content_hash"),)

    id: Mapped[intpk]
    card_id: Mapped[int] = mapped_column(sa.ForeignKey("cards.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(sa.String(64))
    content_hash: Mapped[str] = mapped_column(sa.String(80))
    outcome: Mapped[str] = mapped_column(
        sa.String(64), comment="'vote', 'no-match', 'to-review' or the abstention reason"
    )
    run_id: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[created_at]
