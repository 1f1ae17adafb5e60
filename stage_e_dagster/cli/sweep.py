"""``stage-e sweep``: re-find the whole backlog and launch it as one Dagster backfill."""

from __future__ import annotations

from typing import Annotated

import typer

from ..definitions import defs
from ..defs.hold import release_hold
from ..defs.instance import open_instance
from ..defs.run_queue import dispatch_cap
from ..defs.sweep import SweepRefused, launch_sweep
from .context import catalog_engine, settings
from .errors import CliError
from .output import print_json, progress_bar


def sweep(
    max_batches: Annotated[int, typer.Option("--max-batches", min=1, help="Most micro-batches to launch.")] = 400,
    as_json: Annotated[bool, typer.Option("--json", help="Print the launch as JSON.")] = False,
) -> None:
    """Walk the backlog from the sweep cursor and launch its micro-batches as one backfill (needs the daemon).

    Like the sensors, it refuses unless STAGE_E_STREAMING_ENABLED is true here and no trip is open;
    the daemon's runs check the flag again in the code location's own environment.
    """
    cfg = settings()
    engine = catalog_engine(cfg)
    instance = open_instance(cfg)
    # The walk's length is unknown until it ends (a lap, or --max-batches): a spinner, the cards batched so far.
    with progress_bar("walking the backlog: cards batched", None, quiet=as_json) as bar:
        try:
            launch = launch_sweep(instance, defs.resolve_asset_graph(), cfg, max_batches=max_batches,
                                  progress=bar.done_so_far)
        except SweepRefused as refused:
            raise CliError(f"sweep refused: {refused}") from None
    if launch.backfill_id is not None:
        # only a hold this project applied; never an operator's limit
        release_hold(instance, engine, cap=dispatch_cap(instance, cfg.max_concurrent_dispatches))
    if as_json:
        print_json({
            "backfill_id": launch.backfill_id,
            "batch_keys": launch.batch_keys,
            "card_count": launch.card_count,
            "laps_completed": launch.laps_completed,
            "empty_after_full_lap": launch.empty_after_full_lap,
        })
        return
    if launch.backfill_id is None:
        if launch.empty_after_full_lap:
            typer.echo("backlog empty after a full lap: nothing to sweep")
        else:
            typer.echo("nothing unclaimed to sweep right now (the rest is in flight); run again later")
        return
    typer.echo(
        f"launched backfill {launch.backfill_id}: {len(launch.batch_keys)} micro-batches, {launch.card_count} cards "
        f"(laps completed this call: {launch.laps_completed}); the Dagster daemon runs it, see the Backfills page"
    )
