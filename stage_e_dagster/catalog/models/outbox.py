"""Run-end ledger entries waiting to be reported: written in the transaction that settles the batch."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at, intpk


class LedgerOutbox(Base):
    """One ledger observation of a settled run end. The settle and this row commit together, so a tick
    that dies after settling leaves the entry here for the next tick to report."""

    __tablename__ = "ledger_outbox"
    __table_args__ = (
        sa.Index(
            "ix_ledger_outbox_unreported",
            "id",
            sqlite_where=sa.text("reported_at IS NULL"),
            postgresql_where=sa.text("reported_at IS NULL"),
        ),
    )

    id: Mapped[intpk]
    batch_key: Mapped[str] = mapped_column(sa.String(64))
    run_id: Mapped[str] = mapped_column(sa.String(64))
    entry: Mapped[dict[str, Any]] = mapped_column("metadata", comment="the ledger row the observation carries")
    created_at: Mapped[created_at]
    reported_at: Mapped[datetime | None] = mapped_column(
        comment="when envelope_trip_sensor's tick that emitted it was stored; NULL: still to report"
    )
