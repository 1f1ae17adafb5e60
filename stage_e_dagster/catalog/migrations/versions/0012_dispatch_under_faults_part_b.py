"""dispatch under faults (part B): the host's last clean answer for the throttle streak, cards
waiting on configuration (refused by the settings, out of the backlog until the settings change),
and batches a trip stopped early (status ``stopped``, cards done of cards held)

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

STATUSES_BEFORE = "status IN ('pending', 'running', 'succeeded', 'failed', 'abandoned')"
STATUSES_AFTER = "status IN ('pending', 'running', 'succeeded', 'stopped', 'failed', 'abandoned')"

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fetch_pacer") as batch:
        batch.add_column(sa.Column("last_ok_at", sa.Float(), nullable=True,
                                   comment="epoch seconds of the destination's last clean answer (to within a second)"))
    with op.batch_alter_table("cards") as batch:
        batch.add_column(sa.Column("config_refused_under", sa.String(16), nullable=True,
                                   comment="refused by the settings: the allow-list fingerprint it was refused under; "
                                   "out of the backlog until the settings differ"))
        batch.add_column(sa.Column("config_refused_setting", sa.String(40), nullable=True,
                                   comment="the variable whose change would allow the card's locator"))
    op.create_index("ix_cards_config_refused", "cards", ["config_refused_under"],
                    sqlite_where=sa.text("config_refused_under IS NOT NULL"),
                    postgresql_where=sa.text("config_refused_under IS NOT NULL"))
    with op.batch_alter_table("micro_batches") as batch:
        batch.add_column(sa.Column("cards_done", sa.Integer(), nullable=True,
                                   comment="cards Stage C finished (evidence written or already current); "
                                   "NULL before Stage C ends"))
        batch.add_column(sa.Column("stopped_by_trip", sa.String(48), nullable=True,
                                   comment="the trip that stopped Stage C before every card; NULL when it went through"))
        batch.drop_constraint(op.f("ck_micro_batches_status"), type_="check")
        batch.create_check_constraint(op.f("ck_micro_batches_status"), STATUSES_AFTER)


def downgrade() -> None:
    op.execute("UPDATE micro_batches SET status = 'succeeded' WHERE status = 'stopped'")
    with op.batch_alter_table("micro_batches") as batch:
        batch.drop_constraint(op.f("ck_micro_batches_status"), type_="check")
        batch.create_check_constraint(op.f("ck_micro_batches_status"), STATUSES_BEFORE)
        batch.drop_column("stopped_by_trip")
        batch.drop_column("cards_done")
    # A card waiting on configuration goes back to the backlog the older code reads.
    op.execute("UPDATE cards SET stage_c_pending = true WHERE config_refused_under IS NOT NULL")
    op.drop_index("ix_cards_config_refused", table_name="cards")
    with op.batch_alter_table("cards") as batch:
        batch.drop_column("config_refused_setting")
        batch.drop_column("config_refused_under")
    with op.batch_alter_table("fetch_pacer") as batch:
        batch.drop_column("last_ok_at")
