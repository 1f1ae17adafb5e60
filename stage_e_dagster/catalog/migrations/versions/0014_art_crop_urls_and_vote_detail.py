"""printing art crop URL and vote detail: where Scryfall serves each printing's art, so `stage-e
catalog hash-art` can give printings an art hash without a local folder of images, and which URL
the hash came from; and what a calculator saw when it voted (the fallback's art distances)

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: printings loaded by hand or by the corpus, and records without image_uris, have none.
    with op.batch_alter_table("printings") as batch:
        batch.add_column(sa.Column("art_crop_url", sa.String(length=500), nullable=True,
                                   comment="Scryfall image_uris.art_crop (front face of a multi-face card)"))
        batch.add_column(sa.Column("art_phash_url", sa.String(length=500), nullable=True,
                                   comment="the URL art_phash was computed from; NULL when from a local image"))
    with op.batch_alter_table("printing_votes") as batch:
        batch.add_column(sa.Column("detail", sa.JSON(), nullable=True,
                                   comment="what a calculator saw when it voted (the fallback's art distances); "
                                           "NULL for people"))


def downgrade() -> None:
    with op.batch_alter_table("printing_votes") as batch:
        batch.drop_column("detail")
    with op.batch_alter_table("printings") as batch:
        batch.drop_column("art_phash_url")
        batch.drop_column("art_crop_url")
