"""failures that cannot hide: two new trip bars (``failed_batches``, ``extractor_errors``) and, on each
fetch outcome, the extractor error of a card that was read but whose extractor raised

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

OLD_BARS = ("fetch_lockout", "host_load", "rss", "fetch_failure_rate", "manual")
NEW_BARS = ("fetch_lockout", "host_load", "rss", "fetch_failure_rate", "failed_batches", "extractor_errors", "manual")
EXTRACTOR_ERROR_COMMENT = "the card was read, but an extractor raised: which one, and its error"


def _bars(bars: tuple[str, ...]) -> None:
    # SQLite cannot alter a CHECK constraint: batch mode copies the table (its partial indexes with it).
    with op.batch_alter_table("envelope_trips") as batch:
        batch.drop_constraint(op.f("ck_envelope_trips_bar"), type_="check")
        batch.create_check_constraint(op.f("ck_envelope_trips_bar"), f"bar IN {bars}")


def upgrade() -> None:
    _bars(NEW_BARS)
    with op.batch_alter_table("fetch_outcomes") as batch:
        batch.add_column(sa.Column("extractor_error", sa.String(length=300), nullable=True,
                                   comment=EXTRACTOR_ERROR_COMMENT))


def downgrade() -> None:
    op.execute(f"DELETE FROM envelope_trips WHERE bar NOT IN {OLD_BARS}")
    _bars(OLD_BARS)
    with op.batch_alter_table("fetch_outcomes") as batch:
        batch.drop_column("extractor_error")
