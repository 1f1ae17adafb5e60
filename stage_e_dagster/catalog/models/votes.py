"""Printing votes and the scan log: Stage D's output, and the people's."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at, intpk

VOTE_SOURCES = ("user", "admin", "ocr", "deduction")


class PrintingVote(Base):
    """One agent's vote that a card shows a printing, or shows none (``is_no_match``).

    The two partial unique indexes make a duplicate vote impossible, so writers insert-or-ignore
    and concurrent runs over the same cards cannot collide.
    """

    __tablename__ = "printing_votes"
    __table_args__ = (
        sa.CheckConstraint("(printing_id IS NULL) = is_no_match", name="printing_xor_no_match"),
        sa.CheckConstraint(f"source IN {VOTE_SOURCES}", name="source"),
        sa.Index(
            "uq_printing_votes_card_printing_agent",
            "card_id",
            "printing_id",
            "agent_id",
            unique=True,
            sqlite_where=sa.text("NOT is_no_match"),
            postgresql_where=sa.text("NOT is_no_match"),
        ),
        sa.Index(
            "uq_printing_votes_card_agent_no_match",
            "card_id",
            "agent_id",
            unique=True,
            sqlite_where=sa.text("is_no_match"),
            postgresql_where=sa.text("is_no_match"),
        ),
    )

    id: Mapped[intpk]
    card_id: Mapped[int] = mapped_column(sa.ForeignKey("cards.id", ondelete="CASCADE"), index=True)
    printing_id: Mapped[int | None] = mapped_column(sa.ForeignKey("printings.id", ondelete="CASCADE"))
    is_no_match: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    agent_id: Mapped[str] = mapped_column(sa.String(64), comment="stable engine id or the person's name")
    source: Mapped[str] = mapped_column(sa.String(10))
    confidence: Mapped[float | None] = mapped_column(sa.Float, comment="informational; consensus ignores it")
    detail: Mapped[dict[str, Any] | None] = mapped_column(
        sa.JSON, comment="what a calculator saw when it voted (the fallback's art distances); NULL for people")
    run_id: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    created_at: Mapped[created_at]


class ScanLog(Base):
    """Append-only audit of abstentions, skips and routing (such as ``to-review``)."""

    __tablename__ = "scan_log"
    __table_args__ = (sa.Index("ix_scan_log_card_agent", "card_id", "agent_id"),)

    id: Mapped[intpk]
    card_id: Mapped[int] = mapped_column(sa.ForeignKey("cards.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(sa.String(64))
    run_id: Mapped[str | None] = mapped_column(sa.String(64))
    reason: Mapped[str] = mapped_column(sa.String(64))
    detail: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    scanned_at: Mapped[created_at]
