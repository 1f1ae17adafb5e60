"""stage d pass markers

Revision ID: 0002
Revises: 0001
"""

from alembic import op
import sqlalchemy as sa

import stage_e_dagster.catalog.base  # noqa: F401  (UTCDateTime)


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('stage_d_passes',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('card_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('agent_id', sa.String(length=64), nullable=False),
    sa.Column('content_hash', sa.String(length=80), nullable=False),
    sa.Column('outcome', sa.String(length=64), nullable=False, comment="'vote', 'no-match', 'to-review' or the abstention reason"),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_stage_d_passes_card_id_cards'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_stage_d_passes')),
    sa.UniqueConstraint('card_id', 'agent_id', 'content_hash', name=op.f('uq_stage_d_passes_card_id_agent_id_content_hash'))
    )


def downgrade() -> None:
    op.drop_table('stage_d_passes')
