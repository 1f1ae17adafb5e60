"""sensor heartbeats: each sensor's last tick and the settings its code location runs with

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

import stage_e_dagster.catalog.base  # noqa: F401  (UTCDateTime)

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UTC = stage_e_dagster.catalog.base.UTCDateTime(timezone=True)


def upgrade() -> None:
    # A new table only: a catalogue upgraded under a running daemon simply has no heartbeat until its next tick.
    op.create_table(
        "sensor_heartbeats",
        sa.Column("sensor_name", sa.String(64), nullable=False),
        sa.Column("ticked_at", UTC, nullable=False, comment="when the tick began, on the ticking host's clock"),
        sa.Column("interval_s", sa.Integer(), nullable=False,
                  comment="the sensor's minimum interval between ticks"),
        sa.Column("settings", sa.JSON(), nullable=False,
                  comment="the code location's effective settings (never the database URL or a secret)"),
        sa.Column("governed_limit", sa.Integer(), nullable=True,
                  comment="dispatch concurrency the host-load governor allowed at the tick; NULL: not governed yet"),
        sa.Column("ticked_by", sa.String(160), nullable=False,
                  comment="host name and process id of the ticking process"),
        sa.PrimaryKeyConstraint("sensor_name", name=op.f("pk_sensor_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("sensor_heartbeats")
