"""dispatch leases, manifest rollout, pool controls, one open trip per bar, and the image-change trigger

The trigger is what makes "any writer" true for updates: a raw ``UPDATE cards SET image_locator``
(or of the declared content hash) puts the card back in the Stage C backlog without the writer
calling a helper. A new locator without a new declared hash forgets the old declared hash, which
described the old image.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

import stage_e_dagster.catalog.base  # noqa: F401  (UTCDateTime)

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UTC = stage_e_dagster.catalog.base.UTCDateTime(timezone=True)

SQLITE_TRIGGER = """
CREATE TRIGGER trg_cards_image_changed
AFTER UPDATE OF image_locator, declared_content_hash ON cards
FOR EACH ROW
WHEN NEW.image_locator IS NOT OLD.image_locator
  OR NEW.declared_content_hash IS NOT OLD.declared_content_hash
BEGIN
  UPDATE cards SET
    declared_content_hash = CASE
      WHEN NEW.declared_content_hash IS NOT OLD.declared_content_hash THEN NEW.declared_content_hash
      ELSE NULL END,
    content_hash = CASE
      WHEN NEW.declared_content_hash IS NOT OLD.declared_content_hash THEN NEW.declared_content_hash
      ELSE NULL END,
    stage_c_pending = 1,
    stage_c_attempts = 0
  WHERE id = NEW.id;
END
"""

PG_FUNCTION = """
CREATE FUNCTION cards_image_changed() RETURNS trigger AS $$
BEGIN
  IF NEW.image_locator IS DISTINCT FROM OLD.image_locator
     OR NEW.declared_content_hash IS DISTINCT FROM OLD.declared_content_hash THEN
    IF NEW.declared_content_hash IS NOT DISTINCT FROM OLD.declared_content_hash THEN
      NEW.declared_content_hash := NULL;
    END IF;
    NEW.content_hash := NEW.declared_content_hash;
    NEW.stage_c_pending := true;
    NEW.stage_c_attempts := 0;
  END IF;
  RETURN NEW;
END
$$ LANGUAGE plpgsql
"""

PG_TRIGGER = """
CREATE TRIGGER trg_cards_image_changed
BEFORE UPDATE OF image_locator, declared_content_hash ON cards
FOR EACH ROW EXECUTE FUNCTION cards_image_changed()
"""


def upgrade() -> None:
    with op.batch_alter_table("micro_batches") as batch:
        batch.add_column(sa.Column("started_at", UTC, nullable=True,
                                   comment="when one run took the batch (pending -> running)"))
        batch.add_column(sa.Column("lease_expires_at", UTC, nullable=True,
                                   comment="renewed while the batch waits or runs; a batch is lost only once this passes with no run going"))
        batch.add_column(sa.Column("requested_at", UTC, nullable=True,
                                   comment="when a run was last requested for the batch; NULL: a retry nobody requested yet"))
        batch.add_column(sa.Column("request_count", sa.Integer(), server_default="0", nullable=False,
                                   comment="run requests made; each needs its own run key"))
        batch.add_column(sa.Column("backfill_id", sa.String(length=32), nullable=True,
                                   comment="the sweep backfill that owns attempt 1"))
        batch.create_index("ix_micro_batches_status_finished", ["status", "finished_at"], unique=False)
    op.create_table(
        "manifest_rollouts",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("manifest", sa.String(length=64), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("requeued", sa.Integer(), nullable=False, comment="cards put back in the backlog so far"),
        sa.Column("started_at", UTC, server_default=sa.func.now(), nullable=False),
        sa.Column("completed_at", UTC, nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_manifest_rollouts")),
    )
    op.create_table(
        "pool_controls",
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("applied_limit", sa.Integer(), nullable=True),
        sa.Column("held_at", UTC, nullable=True),
        sa.Column("held_from", sa.Integer(), nullable=True, comment="the limit before the hold; NULL: none"),
        sa.Column("trip_id", sa.String(length=48), nullable=True),
        sa.PrimaryKeyConstraint("pool", name=op.f("pk_pool_controls")),
    )
    op.create_index(
        "uq_envelope_trips_open_bar", "envelope_trips", ["bar"], unique=True,
        sqlite_where=sa.text("acknowledged_at IS NULL AND bar <> 'manual'"),
        postgresql_where=sa.text("acknowledged_at IS NULL AND bar <> 'manual'"),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute(SQLITE_TRIGGER)
    else:
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS trg_cards_image_changed")
    else:
        op.execute("DROP TRIGGER IF EXISTS trg_cards_image_changed ON cards")
        op.execute("DROP FUNCTION IF EXISTS cards_image_changed()")
    op.drop_index("uq_envelope_trips_open_bar", table_name="envelope_trips")
    op.drop_table("pool_controls")
    op.drop_table("manifest_rollouts")
    with op.batch_alter_table("micro_batches") as batch:
        batch.drop_index("ix_micro_batches_status_finished")
        batch.drop_column("backfill_id")
        batch.drop_column("request_count")
        batch.drop_column("requested_at")
        batch.drop_column("lease_expires_at")
        batch.drop_column("started_at")
