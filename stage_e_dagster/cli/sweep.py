"""``stage-e sweep``: re-find the whole backlog and launch it as one Dagster backfill."""

from __future__ import annotations

from typing import Annotated

import typer

from ..definitions import defs
from ..defs.hold import release_hold
from ..defs.instance import open_instance
from ..defs.sweep import SweepRefused, launch_sweep
from .context import catalog_engine, settings
from .errors import CliError


def sweep(
    max_batches: Annotated[int, typer.Option("--max-batches", min=1, help="Most micro-batches to launch.")] = 400,
) -> None:
    """Walk the backlog from the sweep cursor and launch its micro-batches as one backfill (needs the daemon)."""
    cfg = settings()
    engine = catalog_engine(cfg)
    instance = open_instance(cfg)
    try:
        launch = launch_sweep(instance, defs.resolve_asset_graph(), cfg, max_batches=max_batches)
    except SweepRefused as refused:
        raise CliError(f"sweep refused: {refused}") from None
    if launch.backfill_id is None:
        if launch.empty_after_full_lap:
            typer.echo("backlog empty after a full lap: nothing to sweep")
        else:
            typer.echo("nothing unclaimed to sweep right now (the rest is in flight); run again later")
        return
    release_hold(instance, engine)  # only a hold this project applied; never an operator's limit
    typer.echo(
        f"launched backfill {launch.backfill_id}: {len(launch.batch_keys)} micro-batches, {launch.card_count} cards "
        f"(laps completed this call: {launch.laps_completed}); the Dagster daemon runs it, see the Backfills page"
    )
