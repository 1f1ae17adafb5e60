"""What every command needs: the settings and an up-to-date catalogue engine."""

from __future__ import annotations

import sqlalchemy as sa

from ..catalog.engine import engine_for, masked_url
from ..catalog.migrate import current_revision, head_revision
from ..settings import Settings, load_settings
from .errors import CliError


def settings() -> Settings:
    return load_settings()


def catalog_engine(cfg: Settings | None = None, *, require_schema: bool = True) -> sa.Engine:
    """The catalogue engine; refuses with one line when the schema is missing or behind."""
    cfg = cfg or settings()
    engine = engine_for(cfg.database_url)
    if require_schema:
        try:
            current = current_revision(engine)
        except sa.exc.OperationalError as exc:
            raise CliError(f"cannot reach the catalogue at {masked_url(cfg.database_url)}: {exc.orig}") from exc
        if current != head_revision():
            raise CliError(
                f"the catalogue at {masked_url(cfg.database_url)} is at schema {current or 'empty'}, "
                f"not {head_revision()}: run `stage-e db upgrade`"
            )
    return engine
