"""expansion printed size: the total printed after a collector number ("041/281"), Scryfall's
printed_size, so a reading can be checked against the sets that print that total; and the title
bar's name read by Stage C, for Stage D to compare with the upload's name

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: many sets print no total, and a set imported without Scryfall's sets data has none.
    with op.batch_alter_table("expansions") as batch:
        batch.add_column(sa.Column("printed_size", sa.Integer(), nullable=True,
                                   comment="Scryfall's printed_size: the total printed after the number"))
    with op.batch_alter_table("image_evidence") as batch:
        batch.add_column(sa.Column("title_text", sa.String(200), nullable=True,
                                   comment="confident words of the title bar"))
        batch.add_column(sa.Column("title_confidence", sa.Float(), nullable=True,
                                   comment="their mean Tesseract confidence"))


def downgrade() -> None:
    with op.batch_alter_table("image_evidence") as batch:
        batch.drop_column("title_confidence")
        batch.drop_column("title_text")
    with op.batch_alter_table("expansions") as batch:
        batch.drop_column("printed_size")
