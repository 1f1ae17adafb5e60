"""Schema migrations: bring a catalogue up to date, and check that the models match the migrations."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from . import models  # noqa: F401
from .base import Base

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def _config(connection: sa.Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Apply every migration up to ``revision`` (an empty database gets the whole schema)."""
    with engine.begin() as conn:
        command.upgrade(_config(conn), revision)


def schema_drift(engine: sa.Engine) -> list[object]:
    """Differences between the migrated database and the models; empty when they agree."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))
