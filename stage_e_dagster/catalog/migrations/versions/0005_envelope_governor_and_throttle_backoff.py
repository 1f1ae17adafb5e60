"""envelope governor, throttle backoff and the acknowledged fetch window

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

import stage_e_dagster.catalog.base  # noqa: F401  (UTCDateTime)

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UTC = stage_e_dagster.catalog.base.UTCDateTime(timezone=True)

# ``rejected``: an upload's own problem (corrupt, missing, ...), recorded but not a fetch failure.
OUTCOMES_BEFORE = "outcome IN ('ok', 'throttled', 'failed', 'lockout')"
OUTCOMES_AFTER = "outcome IN ('ok', 'throttled', 'failed', 'rejected', 'lockout')"


def _replace_outcome_check(condition: str) -> None:
    with op.batch_alter_table("fetch_outcomes") as batch:
        batch.drop_constraint(op.f("ck_fetch_outcomes_outcome"), type_="check")
        batch.create_check_constraint(op.f("ck_fetch_outcomes_outcome"), condition)


def upgrade() -> None:
    with op.batch_alter_table("cards") as batch:
        batch.add_column(sa.Column("next_eligible_at", UTC, nullable=True,
                                   comment="a throttled card (429/503) is not batched again before this time"))
        batch.add_column(sa.Column("throttle_count", sa.Integer(), server_default="0", nullable=False,
                                   comment="429/503 answers in a row for the present image"))
    with op.batch_alter_table("envelope_trips") as batch:
        batch.add_column(sa.Column("window_floor_id", sa.BigInteger(), nullable=True,
                                   comment="newest fetch outcome at the ack: outcomes up to it no longer count toward a bar"))
    with op.batch_alter_table("pool_controls") as batch:
        batch.add_column(sa.Column("governed_limit", sa.Integer(), nullable=True,
                                   comment="dispatch concurrency the host-load governor allows now (1 .. the cap)"))
        batch.add_column(sa.Column("over_hard_since", UTC, nullable=True,
                                   comment="since when load has stayed over the hard bar with the governor at its floor"))
        batch.add_column(sa.Column("governed_at", UTC, nullable=True, comment="the governor's last decision"))
    _replace_outcome_check(OUTCOMES_AFTER)


def downgrade() -> None:
    # The older code recorded a rejected upload as a failure.
    op.execute("UPDATE fetch_outcomes SET outcome = 'failed' WHERE outcome = 'rejected'")
    _replace_outcome_check(OUTCOMES_BEFORE)
    with op.batch_alter_table("pool_controls") as batch:
        batch.drop_column("governed_at")
        batch.drop_column("over_hard_since")
        batch.drop_column("governed_limit")
    with op.batch_alter_table("envelope_trips") as batch:
        batch.drop_column("window_floor_id")
    with op.batch_alter_table("cards") as batch:
        batch.drop_column("throttle_count")
        batch.drop_column("next_eligible_at")
