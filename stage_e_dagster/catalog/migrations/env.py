"""Alembic environment: runs on the connection ``catalog.migrate`` hands it."""

from __future__ import annotations

from alembic import context

from stage_e_dagster.catalog import models  # noqa: F401  (registers every table)
from stage_e_dagster.catalog.base import Base

config = context.config
connection = config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
