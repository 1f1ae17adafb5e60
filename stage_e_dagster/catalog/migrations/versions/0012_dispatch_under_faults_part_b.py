"""dispatch under faults (part B): the host's last clean answer for the throttle streak

Revision ID: 0012
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fetch_pacer") as batch:
        batch.add_column(sa.Column("last_ok_at", sa.Float(), nullable=True,
                                   comment="epoch seconds of the destination's last clean answer (to within a second)"))


def downgrade() -> None:
    with op.batch_alter_table("fetch_pacer") as batch:
        batch.drop_column("last_ok_at")
