"""expansion printed size: the total printed after a collector number ("041/281"), Scryfall's
printed_size, so a reading can be checked against the sets that print that total

Revision ID: 0013
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: many sets print no total, and a set imported without Scryfall's sets data has none.
    with op.batch_alter_table("expansions") as batch:
        batch.add_column(sa.Column("printed_size", sa.Integer(), nullable=True,
                                   comment="Scryfall's printed_size: the total printed after the number"))


def downgrade() -> None:
    with op.batch_alter_table("expansions") as batch:
        batch.drop_column("printed_size")
