"""``stage-e batches``: list micro-batches, and prune old ones so the partition count stays bounded."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.table import Table

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.models import MicroBatch
from ..defs.instance import open_instance
from ..defs.retention import prune_batches
from .context import catalog_engine, settings

app = typer.Typer(help="Micro-batches: the catalogue side of the dynamic partitions.", no_args_is_help=True)


@app.command("list")
def list_command(
    limit: Annotated[int, typer.Option("--limit", min=1, help="Newest batches to show.")] = 50,
) -> None:
    """The newest micro-batches with their status."""
    with session_scope(catalog_engine()) as session:
        rows = (
            session.execute(sa.select(MicroBatch).order_by(MicroBatch.created_at.desc()).limit(limit)).scalars().all()
        )
        table = Table("batch", "status", "trigger", "attempt", "cards", "created (UTC)", "failure")
        for b in rows:
            table.add_row(
                b.batch_key,
                b.status,
                b.trigger_reason,
                str(b.attempt),
                str(len(b.card_ids)),
                f"{b.created_at:%Y-%m-%d %H:%M:%S}",
                (b.failure_reason or "")[:60],
            )
    Console().print(table)


@app.command()
def prune(
    older_than_days: Annotated[
        float | None,
        typer.Option("--older-than-days", min=0, help="Age of batches to delete; default STAGE_E_RETENTION_DAYS."),
    ] = None,
) -> None:
    """Delete finished batches' partitions and rows older than the cutoff (their events stay in the ledger).

    The retention sensor does the same by itself while streaming is on; this is for when it is off.
    """
    cfg = settings()
    engine = catalog_engine(cfg)
    days = cfg.retention_days if older_than_days is None else older_than_days
    count = prune_batches(open_instance(cfg), engine, finished_before=utcnow() - timedelta(days=days))
    typer.echo(f"pruned {count} finished micro-batches older than {days:g} days")
