"""``stage-e db``: bring the catalogue's schema up to date, or check it."""

from __future__ import annotations

import typer

from ..catalog.engine import masked_url
from ..catalog.migrate import current_revision, head_revision, schema_drift
from ..catalog.migrate import upgrade as run_upgrade
from .context import catalog_engine, settings
from .errors import CliError

app = typer.Typer(help="Catalogue database schema.", no_args_is_help=True, rich_markup_mode=None)


@app.command()
def upgrade() -> None:
    """Apply every pending migration (an empty database gets the whole schema)."""
    cfg = settings()
    engine = catalog_engine(cfg, require_schema=False)
    before = current_revision(engine)
    run_upgrade(engine)
    after = current_revision(engine)
    if before == after:
        typer.echo(f"catalogue {masked_url(cfg.database_url)} already at {after}")
    else:
        typer.echo(f"catalogue {masked_url(cfg.database_url)} upgraded {before or 'empty'} -> {after}")


@app.command()
def check() -> None:
    """Fail unless the catalogue is at the head revision and matches the models."""
    cfg = settings()
    engine = catalog_engine(cfg)
    drift = schema_drift(engine)
    if drift:
        raise CliError(f"schema drift against the models: {drift}")
    typer.echo(f"catalogue at {head_revision()}, no drift")
