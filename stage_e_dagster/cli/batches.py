"""``stage-e batches``: list micro-batches, and prune old ones so the partition count stays bounded."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import sqlalchemy as sa
import typer

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..catalog.models import MicroBatch
from ..defs.instance import open_instance
from ..defs.retention import prune_batches
from .context import catalog_engine, settings
from .output import clipped, print_json, print_table, table

app = typer.Typer(help="Micro-batches: the catalogue side of the dynamic partitions.", no_args_is_help=True,
                  rich_markup_mode=None)


def batch_dict(batch: MicroBatch) -> dict[str, Any]:
    def when(moment: datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "batch_key": batch.batch_key,
        "status": batch.status,
        "trigger_reason": batch.trigger_reason,
        "attempt": batch.attempt,
        "retry_of": batch.retry_of,
        "card_count": len(batch.card_ids),
        "cards_done": batch.cards_done,
        "stopped_by_trip": batch.stopped_by_trip,
        "card_ids": list(batch.card_ids),
        "run_id": batch.run_id,
        "backfill_id": batch.backfill_id,
        "created_at": when(batch.created_at),
        "started_at": when(batch.started_at),
        "finished_at": when(batch.finished_at),
        "peak_rss_mb": batch.peak_rss_mb,
        "failure_reason": batch.failure_reason,
    }


@app.command("list")
def list_command(
    limit: Annotated[int, typer.Option("--limit", min=1, help="Newest batches to show.")] = 50,
    wide: Annotated[bool, typer.Option("--wide", help="Add the run id and the whole failure reason.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (card ids included).")] = False,
) -> None:
    """The newest micro-batches with their status."""
    with session_scope(catalog_engine()) as session:
        rows = [
            batch_dict(b)
            for b in session.execute(sa.select(MicroBatch).order_by(MicroBatch.created_at.desc()).limit(limit))
            .scalars()
            .all()
        ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo("no micro-batches")
        return
    columns = ["batch", "status", "trigger", "try", "cards", "created (UTC)"]
    columns += ["run", "failure"] if wide else ["failure"]
    grid = table(*columns, ids=("batch", "run"))
    for b in rows:
        # A batch a trip stopped early shows the cards done of the cards it held.
        cards = f"{b['cards_done']}/{b['card_count']}" if b["stopped_by_trip"] else str(b["card_count"])
        row = [b["batch_key"], b["status"], b["trigger_reason"], str(b["attempt"]), cards,
               b["created_at"][:19].replace("T", " ")]
        failure = b["failure_reason"] or (f"stopped by trip {b['stopped_by_trip']}" if b["stopped_by_trip"] else "")
        row += [b["run_id"] or "", failure] if wide else [clipped(failure)]
        grid.add_row(*row)
    print_table(grid)


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
