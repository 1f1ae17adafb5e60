"""title rows from the scene-text reader: Stage C now stores the rows at the title end of the card's
text (the name first, one per line) and the recogniser's mean score, not Tesseract's words of the
title bar; only the columns' comments change

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("image_evidence") as batch:
        batch.alter_column("title_text", existing_type=sa.String(length=200), existing_nullable=True,
                           comment="the rows at the title end of the card's text, one per line, the name first",
                           existing_comment="confident words of the title bar")
        batch.alter_column("title_confidence", existing_type=sa.Float(), existing_nullable=True,
                           comment="the title rows' mean recogniser score, 0-100",
                           existing_comment="their mean Tesseract confidence")


def downgrade() -> None:
    with op.batch_alter_table("image_evidence") as batch:
        batch.alter_column("title_confidence", existing_type=sa.Float(), existing_nullable=True,
                           comment="their mean Tesseract confidence",
                           existing_comment="the title rows' mean recogniser score, 0-100")
        batch.alter_column("title_text", existing_type=sa.String(length=200), existing_nullable=True,
                           comment="confident words of the title bar",
                           existing_comment="the rows at the title end of the card's text, one per line, the name first")
