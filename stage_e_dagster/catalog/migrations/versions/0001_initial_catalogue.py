"""initial catalogue

Revision ID: 0001
Revises: 
"""

from alembic import op
import sqlalchemy as sa

import stage_e_dagster.catalog.base  # noqa: F401  (UTCDateTime)


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('envelope_trips',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('trip_id', sa.String(length=48), nullable=False),
    sa.Column('bar', sa.String(length=32), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('tripped_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('acknowledged_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('acknowledged_by', sa.String(length=120), nullable=True),
    sa.Column('acknowledged_note', sa.Text(), nullable=True),
    sa.CheckConstraint("bar IN ('fetch_lockout', 'host_load', 'rss', 'fetch_failure_rate', 'manual')", name=op.f('ck_envelope_trips_bar')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_envelope_trips')),
    sa.UniqueConstraint('trip_id', name=op.f('uq_envelope_trips_trip_id'))
    )
    op.create_index('ix_envelope_trips_open', 'envelope_trips', ['tripped_at'], unique=False, sqlite_where=sa.text('acknowledged_at IS NULL'), postgresql_where=sa.text('acknowledged_at IS NULL'))
    op.create_index(op.f('ix_envelope_trips_run_id'), 'envelope_trips', ['run_id'], unique=False)
    op.create_table('expansions',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('code', sa.String(length=16), nullable=False, comment='lower-case set code'),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('released_at', sa.Date(), nullable=True),
    sa.Column('scryfall_id', sa.String(length=36), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_expansions')),
    sa.UniqueConstraint('code', name=op.f('uq_expansions_code')),
    sa.UniqueConstraint('scryfall_id', name=op.f('uq_expansions_scryfall_id'))
    )
    op.create_table('fetch_outcomes',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('status_code', sa.Integer(), nullable=True),
    sa.Column('host', sa.String(length=255), nullable=True),
    sa.Column('card_id', sa.BigInteger(), nullable=True),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('recorded_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.CheckConstraint("outcome IN ('ok', 'throttled', 'failed', 'lockout')", name=op.f('ck_fetch_outcomes_outcome')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_fetch_outcomes'))
    )
    op.create_table('fetch_pacer',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('next_slot_at', sa.Float(), nullable=False, comment='epoch seconds'),
    sa.Column('interval_scale', sa.Float(), nullable=False, comment='backoff multiplier after 429/503'),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_fetch_pacer'))
    )
    op.create_table('micro_batches',
    sa.Column('batch_key', sa.String(length=64), nullable=False),
    sa.Column('card_ids', sa.JSON(), nullable=False),
    sa.Column('trigger_reason', sa.String(length=32), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('retry_of', sa.String(length=64), nullable=True, comment='the batch this one retries'),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('peak_rss_mb', sa.Float(), nullable=True, comment="the run worker's true peak"),
    sa.Column('created_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('finished_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), nullable=True),
    sa.CheckConstraint("status IN ('pending', 'running', 'succeeded', 'failed', 'abandoned')", name=op.f('ck_micro_batches_status')),
    sa.PrimaryKeyConstraint('batch_key', name=op.f('pk_micro_batches'))
    )
    op.create_index(op.f('ix_micro_batches_run_id'), 'micro_batches', ['run_id'], unique=False)
    op.create_index('ix_micro_batches_status_created', 'micro_batches', ['status', 'created_at'], unique=False)
    op.create_table('sweep_cursors',
    sa.Column('name', sa.String(length=32), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.Column('lap', sa.Integer(), nullable=False),
    sa.Column('found_this_lap', sa.Integer(), nullable=False),
    sa.Column('updated_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_sweep_cursors'))
    )
    op.create_table('printings',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('scryfall_id', sa.String(length=36), nullable=True),
    sa.Column('expansion_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=300), nullable=False, comment="double-faced cards as 'Front // Back'"),
    sa.Column('normalized_name', sa.String(length=300), nullable=False),
    sa.Column('collector_number', sa.String(length=16), nullable=False),
    sa.Column('lang', sa.String(length=8), nullable=False),
    sa.Column('artist', sa.String(length=200), nullable=True),
    sa.Column('border_color', sa.String(length=16), nullable=True),
    sa.Column('frame', sa.String(length=16), nullable=True, comment='Scryfall frame: 1993, 1997, 2003, 2015, future'),
    sa.Column('layout', sa.String(length=32), nullable=True),
    sa.Column('released_at', sa.Date(), nullable=True),
    sa.Column('image_phash', sa.BigInteger(), nullable=True, comment='signed 64-bit pHash of the whole card'),
    sa.Column('art_phash', sa.BigInteger(), nullable=True, comment='signed 64-bit pHash of the art box'),
    sa.ForeignKeyConstraint(['expansion_id'], ['expansions.id'], name=op.f('fk_printings_expansion_id_expansions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_printings')),
    sa.UniqueConstraint('expansion_id', 'collector_number', 'lang', name=op.f('uq_printings_expansion_id_collector_number_lang')),
    sa.UniqueConstraint('scryfall_id', name=op.f('uq_printings_scryfall_id'))
    )
    op.create_index(op.f('ix_printings_normalized_name'), 'printings', ['normalized_name'], unique=False)
    op.create_table('cards',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('identifier', sa.String(length=200), nullable=False, comment="the source's id"),
    sa.Column('name', sa.String(length=300), nullable=False),
    sa.Column('image_locator', sa.String(length=2000), nullable=False, comment='file:// or http(s):// URL'),
    sa.Column('card_type', sa.String(length=16), server_default='card', nullable=False),
    sa.Column('dpi', sa.Integer(), nullable=True),
    sa.Column('declared_content_hash', sa.String(length=64), nullable=True, comment='sha256 hex of the image bytes, when the source states it'),
    sa.Column('content_hash', sa.String(length=80), nullable=True, comment='hash of the present image; NULL until known. Writers that change the image reset it'),
    sa.Column('printing_status', sa.String(length=10), server_default='unresolved', nullable=False),
    sa.Column('inferred_printing_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('stage_c_pending', sa.Boolean(), server_default=sa.text('true'), nullable=False, comment='no current evidence for the present image'),
    sa.Column('stage_d_pending', sa.Boolean(), server_default=sa.text('false'), nullable=False, comment='current evidence is newer than the last Stage D pass'),
    sa.Column('evidence_writer', sa.String(length=80), nullable=True, comment="who last wrote this card's evidence: dispatch:<run>, bulk:<id>, or a person"),
    sa.Column('stage_c_attempts', sa.Integer(), server_default='0', nullable=False, comment='transient fetch failures for the present image'),
    sa.Column('created_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('updated_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), nullable=True),
    sa.CheckConstraint("card_type IN ('card', 'cardback', 'token')", name=op.f('ck_cards_card_type')),
    sa.CheckConstraint("printing_status IN ('unresolved', 'resolved', 'no_match')", name=op.f('ck_cards_printing_status')),
    sa.ForeignKeyConstraint(['inferred_printing_id'], ['printings.id'], name=op.f('fk_cards_inferred_printing_id_printings'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cards')),
    sa.UniqueConstraint('identifier', name=op.f('uq_cards_identifier'))
    )
    op.create_index(op.f('ix_cards_content_hash'), 'cards', ['content_hash'], unique=False)
    op.create_index(op.f('ix_cards_printing_status'), 'cards', ['printing_status'], unique=False)
    op.create_index('ix_cards_stage_c_backlog', 'cards', ['id'], unique=False, sqlite_where=sa.text('stage_c_pending'), postgresql_where=sa.text('stage_c_pending'))
    op.create_index('ix_cards_stage_d_backlog', 'cards', ['id'], unique=False, sqlite_where=sa.text('stage_d_pending'), postgresql_where=sa.text('stage_d_pending'))
    op.create_table('card_claims',
    sa.Column('card_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('batch_key', sa.String(length=64), nullable=False),
    sa.Column('expires_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_card_claims_card_id_cards'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('card_id', name=op.f('pk_card_claims'))
    )
    op.create_index(op.f('ix_card_claims_batch_key'), 'card_claims', ['batch_key'], unique=False)
    op.create_index(op.f('ix_card_claims_expires_at'), 'card_claims', ['expires_at'], unique=False)
    op.create_table('image_evidence',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('card_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('content_hash', sa.String(length=80), nullable=False),
    sa.Column('extractor_versions', sa.JSON(), nullable=False),
    sa.Column('skip_reasons', sa.JSON(), nullable=False),
    sa.Column('terminal', sa.Boolean(), nullable=False, comment='a failed fetch or undecodable image: no re-fetch until the image changes'),
    sa.Column('fetch_ok', sa.Boolean(), nullable=True),
    sa.Column('fetch_error_class', sa.String(length=32), nullable=True),
    sa.Column('fetch_latency_ms', sa.Float(), nullable=True),
    sa.Column('image_format', sa.String(length=16), nullable=True),
    sa.Column('byte_size', sa.Integer(), nullable=True),
    sa.Column('md5', sa.String(length=32), nullable=True),
    sa.Column('sha256', sa.String(length=64), nullable=True),
    sa.Column('width', sa.Integer(), nullable=True),
    sa.Column('height', sa.Integer(), nullable=True),
    sa.Column('aspect_ratio', sa.Float(), nullable=True),
    sa.Column('bleed_class', sa.String(length=16), nullable=True),
    sa.Column('layout_class', sa.String(length=16), nullable=True),
    sa.Column('crops', sa.JSON(), nullable=True),
    sa.Column('collector_line_raw_text', sa.Text(), nullable=True),
    sa.Column('collector_set_code', sa.String(length=16), nullable=True),
    sa.Column('collector_number', sa.String(length=16), nullable=True),
    sa.Column('collector_language', sa.String(length=8), nullable=True),
    sa.Column('collector_word_boxes', sa.JSON(), nullable=True),
    sa.Column('artist_raw_text', sa.Text(), nullable=True),
    sa.Column('artist_name', sa.String(length=64), nullable=True),
    sa.Column('illus_anchor_fired', sa.Boolean(), nullable=True),
    sa.Column('symbol_phash', sa.BigInteger(), nullable=True),
    sa.Column('art_phash', sa.BigInteger(), nullable=True),
    sa.Column('legal_raw_text', sa.Text(), nullable=True),
    sa.Column('copyright_year', sa.Integer(), nullable=True),
    sa.Column('proxy_marker', sa.Boolean(), nullable=True),
    sa.Column('is_truncated', sa.Boolean(), nullable=True),
    sa.Column('blur_variance', sa.Float(), nullable=True),
    sa.Column('entropy', sa.Float(), nullable=True),
    sa.Column('color_mean_rgb', sa.JSON(), nullable=True),
    sa.Column('color_stddev_rgb', sa.JSON(), nullable=True),
    sa.Column('writer', sa.String(length=80), nullable=False, comment='dispatch:<run>, bulk:<id>, or a person'),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('updated_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_image_evidence_card_id_cards'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_image_evidence')),
    sa.UniqueConstraint('card_id', 'content_hash', name=op.f('uq_image_evidence_card_id_content_hash'))
    )
    op.create_index(op.f('ix_image_evidence_run_id'), 'image_evidence', ['run_id'], unique=False)
    op.create_index(op.f('ix_image_evidence_sha256'), 'image_evidence', ['sha256'], unique=False)
    op.create_table('printing_votes',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('card_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('printing_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('is_no_match', sa.Boolean(), nullable=False),
    sa.Column('agent_id', sa.String(length=64), nullable=False, comment="stable engine id or the person's name"),
    sa.Column('source', sa.String(length=10), nullable=False),
    sa.Column('confidence', sa.Float(), nullable=True, comment='informational; consensus ignores it'),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.CheckConstraint("source IN ('user', 'admin', 'ocr', 'deduction')", name=op.f('ck_printing_votes_source')),
    sa.CheckConstraint('(printing_id IS NULL) = is_no_match', name=op.f('ck_printing_votes_printing_xor_no_match')),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_printing_votes_card_id_cards'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['printing_id'], ['printings.id'], name=op.f('fk_printing_votes_printing_id_printings'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_printing_votes'))
    )
    op.create_index(op.f('ix_printing_votes_card_id'), 'printing_votes', ['card_id'], unique=False)
    op.create_index(op.f('ix_printing_votes_run_id'), 'printing_votes', ['run_id'], unique=False)
    op.create_index('uq_printing_votes_card_agent_no_match', 'printing_votes', ['card_id', 'agent_id'], unique=True, sqlite_where=sa.text('is_no_match'), postgresql_where=sa.text('is_no_match'))
    op.create_index('uq_printing_votes_card_printing_agent', 'printing_votes', ['card_id', 'printing_id', 'agent_id'], unique=True, sqlite_where=sa.text('NOT is_no_match'), postgresql_where=sa.text('NOT is_no_match'))
    op.create_table('scan_log',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('card_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('agent_id', sa.String(length=64), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('reason', sa.String(length=64), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=True),
    sa.Column('scanned_at', stage_e_dagster.catalog.base.UTCDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['card_id'], ['cards.id'], name=op.f('fk_scan_log_card_id_cards'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_scan_log'))
    )
    op.create_index('ix_scan_log_card_agent', 'scan_log', ['card_id', 'agent_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_scan_log_card_agent', table_name='scan_log')
    op.drop_table('scan_log')
    op.drop_index('uq_printing_votes_card_printing_agent', table_name='printing_votes', sqlite_where=sa.text('NOT is_no_match'), postgresql_where=sa.text('NOT is_no_match'))
    op.drop_index('uq_printing_votes_card_agent_no_match', table_name='printing_votes', sqlite_where=sa.text('is_no_match'), postgresql_where=sa.text('is_no_match'))
    op.drop_index(op.f('ix_printing_votes_run_id'), table_name='printing_votes')
    op.drop_index(op.f('ix_printing_votes_card_id'), table_name='printing_votes')
    op.drop_table('printing_votes')
    op.drop_index(op.f('ix_image_evidence_sha256'), table_name='image_evidence')
    op.drop_index(op.f('ix_image_evidence_run_id'), table_name='image_evidence')
    op.drop_table('image_evidence')
    op.drop_index(op.f('ix_card_claims_expires_at'), table_name='card_claims')
    op.drop_index(op.f('ix_card_claims_batch_key'), table_name='card_claims')
    op.drop_table('card_claims')
    op.drop_index('ix_cards_stage_d_backlog', table_name='cards', sqlite_where=sa.text('stage_d_pending'), postgresql_where=sa.text('stage_d_pending'))
    op.drop_index('ix_cards_stage_c_backlog', table_name='cards', sqlite_where=sa.text('stage_c_pending'), postgresql_where=sa.text('stage_c_pending'))
    op.drop_index(op.f('ix_cards_printing_status'), table_name='cards')
    op.drop_index(op.f('ix_cards_content_hash'), table_name='cards')
    op.drop_table('cards')
    op.drop_index(op.f('ix_printings_normalized_name'), table_name='printings')
    op.drop_table('printings')
    op.drop_table('sweep_cursors')
    op.drop_index('ix_micro_batches_status_created', table_name='micro_batches')
    op.drop_index(op.f('ix_micro_batches_run_id'), table_name='micro_batches')
    op.drop_table('micro_batches')
    op.drop_table('fetch_pacer')
    op.drop_table('fetch_outcomes')
    op.drop_table('expansions')
    op.drop_index(op.f('ix_envelope_trips_run_id'), table_name='envelope_trips')
    op.drop_index('ix_envelope_trips_open', table_name='envelope_trips', sqlite_where=sa.text('acknowledged_at IS NULL'), postgresql_where=sa.text('acknowledged_at IS NULL'))
    op.drop_table('envelope_trips')
