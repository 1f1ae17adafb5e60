"""backlog partial indexes that SQLite's planner matches

SQLite uses a partial index only for a query whose WHERE clause contains the index's own term.
The backlog queries say ``stage_c_pending = 1`` (what SQLAlchemy renders for ``= true``), so the
indexes must say the same. PostgreSQL proves ``= true`` from a bare-column predicate and keeps
its indexes.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

INDEXES = (("ix_cards_stage_c_backlog", "stage_c_pending"), ("ix_cards_stage_d_backlog", "stage_d_pending"))


def _recreate(where: str) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, column in INDEXES:
        op.drop_index(name, table_name="cards")
        op.create_index(name, "cards", ["id"], unique=False, sqlite_where=sa.text(where.format(column=column)))


def upgrade() -> None:
    _recreate("{column} = 1")


def downgrade() -> None:
    _recreate("{column}")
