"""expansion card count: how many cards Scryfall gives for a set, so a set the catalogue holds
completely can be told from one it holds in part

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: a set imported without Scryfall's sets data has no count, and then never counts as complete.
    with op.batch_alter_table("expansions") as batch:
        batch.add_column(sa.Column("card_count", sa.Integer(), nullable=True,
                                   comment="Scryfall's card_count for the set; NULL when not imported"))


def downgrade() -> None:
    with op.batch_alter_table("expansions") as batch:
        batch.drop_column("card_count")
