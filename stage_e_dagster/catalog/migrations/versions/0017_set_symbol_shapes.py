"""set symbol shapes: each expansion's icon URI (Scryfall icon_svg_uri) and the silhouette `stage-e
catalog fetch-symbols` rendered from it, and the silhouette Stage C read at the type line's right end
of a card, so Stage D can tell sets apart by the symbol a card prints

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

SYMBOL_SHAPE_COMMENT = "the silhouette of the set symbol at the type line's right end (catalog/symbol_shape.py)"


def upgrade() -> None:
    # Nullable: sets imported without a sets file, or not rendered yet, have none; so has evidence read
    # before the set_symbol extractor existed (the manifest makes it stale, not the schema).
    with op.batch_alter_table("expansions") as batch:
        batch.add_column(sa.Column("symbol_svg_uri", sa.String(length=500), nullable=True,
                                   comment="Scryfall icon_svg_uri: the set symbol's SVG"))
        batch.add_column(sa.Column("symbol_shape", sa.LargeBinary(length=128), nullable=True,
                                   comment="the set symbol's silhouette (catalog/symbol_shape.py); "
                                           "NULL when not rendered"))
        batch.add_column(sa.Column("symbol_shape_uri", sa.String(length=500), nullable=True,
                                   comment="the URI symbol_shape was rendered from; NULL when from a local SVG"))
    with op.batch_alter_table("image_evidence") as batch:
        batch.add_column(sa.Column("symbol_shape", sa.LargeBinary(length=128), nullable=True,
                                   comment=SYMBOL_SHAPE_COMMENT))


def downgrade() -> None:
    with op.batch_alter_table("image_evidence") as batch:
        batch.drop_column("symbol_shape")
    with op.batch_alter_table("expansions") as batch:
        batch.drop_column("symbol_shape_uri")
        batch.drop_column("symbol_shape")
        batch.drop_column("symbol_svg_uri")
