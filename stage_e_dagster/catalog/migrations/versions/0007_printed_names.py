"""printed names: the name each printing carries in its own language, and its faces' names

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # All nullable: printings imported before this revision simply have no printed names until re-imported.
    with op.batch_alter_table("printings") as batch:
        batch.add_column(sa.Column("printed_name", sa.String(300), nullable=True,
                                   comment="the name as printed in this printing's language (Scryfall printed_name)"))
        batch.add_column(sa.Column("face_names", sa.JSON(), nullable=True,
                                   comment="card_faces[].name of a multi-face printing, front first"))
        batch.add_column(sa.Column("printed_face_names", sa.JSON(), nullable=True,
                                   comment="card_faces[].printed_name of a multi-face printing, front first"))


def downgrade() -> None:
    with op.batch_alter_table("printings") as batch:
        batch.drop_column("printed_face_names")
        batch.drop_column("face_names")
        batch.drop_column("printed_name")
