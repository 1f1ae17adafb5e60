"""run progress, sensor tickers and the ledger outbox: a run's last sign of life on its batch, every
process that ticks a sensor, and run-end ledger entries written with the state change they record

Revision ID: 0011
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

import stage_e_dagster.catalog.base  # noqa: F401  (UTCDateTime)

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

UTC = stage_e_dagster.catalog.base.UTCDateTime(timezone=True)


def upgrade() -> None:
    # Nullable: a batch taken before this revision simply shows no progress until its next card.
    with op.batch_alter_table("micro_batches") as batch:
        batch.add_column(sa.Column("progress_at", UTC, nullable=True,
                                   comment="the holding run's last card boundary: its worker is alive"))
    op.create_table(
        "sensor_tickers",
        sa.Column("sensor_name", sa.String(64), nullable=False),
        sa.Column("ticked_by", sa.String(160), nullable=False, comment="host name and process id"),
        sa.Column("first_ticked_at", UTC, nullable=False, comment="this process's first tick of the sensor"),
        sa.Column("ticked_at", UTC, nullable=False, comment="its latest tick"),
        sa.PrimaryKeyConstraint("sensor_name", "ticked_by", name=op.f("pk_sensor_tickers")),
    )
    op.create_table(
        "ledger_outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("batch_key", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False, comment="the ledger row the observation carries"),
        sa.Column("created_at", UTC, server_default=sa.func.now(), nullable=False),
        sa.Column("reported_at", UTC, nullable=True,
                  comment="when envelope_trip_sensor's tick that emitted it was stored; NULL: still to report"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_outbox")),
    )
    op.create_index("ix_ledger_outbox_unreported", "ledger_outbox", ["id"],
                    sqlite_where=sa.text("reported_at IS NULL"), postgresql_where=sa.text("reported_at IS NULL"))


def downgrade() -> None:
    op.drop_index("ix_ledger_outbox_unreported", table_name="ledger_outbox")
    op.drop_table("ledger_outbox")
    op.drop_table("sensor_tickers")
    with op.batch_alter_table("micro_batches") as batch:
        batch.drop_column("progress_at")
