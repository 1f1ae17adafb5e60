"""card localisation evidence: where Stage C found the card and how sure it is

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("image_evidence") as batch:
        batch.add_column(sa.Column("card_quad", sa.JSON(), nullable=True,
                                   comment="card corners in source pixels, [[x, y] x4], clockwise from its top-left"))
        batch.add_column(sa.Column("localisation_confidence", sa.Float(), nullable=True,
                                   comment="0..1: how sure Stage C is that the quad is the card"))
        batch.add_column(sa.Column("localisation_rotation", sa.Integer(), nullable=True,
                                   comment="quarter turns applied to make the card upright: 0, 90, 180 or 270 degrees"))
        batch.add_column(sa.Column("localisation_tilt_deg", sa.Float(), nullable=True,
                                   comment="small tilt of the card in the source, degrees"))
        batch.add_column(sa.Column("localisation_method", sa.String(16), nullable=True,
                                   comment="whole-image, contour or fallback"))
        batch.add_column(sa.Column("layout_confidence", sa.Float(), nullable=True,
                                   comment="0..1: below the bar the border / layout reading is not a veto"))


def downgrade() -> None:
    with op.batch_alter_table("image_evidence") as batch:
        batch.drop_column("layout_confidence")
        batch.drop_column("localisation_method")
        batch.drop_column("localisation_tilt_deg")
        batch.drop_column("localisation_rotation")
        batch.drop_column("localisation_confidence")
        batch.drop_column("card_quad")
