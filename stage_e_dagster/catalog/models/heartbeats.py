"""What the running code location last did: one row per sensor, rewritten by its every tick."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base


class SensorHeartbeat(Base):
    """A sensor's last tick and the settings its code location ran it with, so ``stage-e status`` can
    show the daemon's settings rather than the shell's, and notice a daemon that stopped ticking."""

    __tablename__ = "sensor_heartbeats"

    sensor_name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    ticked_at: Mapped[datetime] = mapped_column(comment="when the tick began, on the ticking host's clock")
    interval_s: Mapped[int] = mapped_column(sa.Integer, comment="the sensor's minimum interval between ticks")
    settings: Mapped[dict[str, Any]] = mapped_column(
        comment="the code location's effective settings (never the database URL or a secret)"
    )
    governed_limit: Mapped[int | None] = mapped_column(
        sa.Integer, comment="dispatch concurrency the host-load governor allowed at the tick; NULL: not governed yet"
    )
    ticked_by: Mapped[str] = mapped_column(sa.String(160), comment="host name and process id of the ticking process")


class SensorTicker(Base):
    """Each process that ticks a sensor, with the span of its ticks: two spans that overlap mean two
    daemons (or ``dagster dev`` beside a daemon) run the same sensors, which Dagster does not support."""

    __tablename__ = "sensor_tickers"

    sensor_name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    ticked_by: Mapped[str] = mapped_column(sa.String(160), primary_key=True, comment="host name and process id")
    first_ticked_at: Mapped[datetime] = mapped_column(comment="this process's first tick of the sensor")
    ticked_at: Mapped[datetime] = mapped_column(comment="its latest tick")
