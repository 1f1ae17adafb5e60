"""``stage-e ledger``: the micro-batches Dagster's event log recorded, with throughput."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated

import typer

from ..defs.instance import open_instance
from ..defs.ledger import cards_per_hour, ledger_entries
from .context import settings
from .errors import CliError
from .output import clipped, print_json, print_table, table

# The default table: what an operator scans at 80 columns; ``--wide`` adds the rest of the ledger.
SHOWN = ("card_count", "stage_c_completed", "stage_c_fetch_failures", "consensus_changed", "elapsed_s")
SHOWN_WIDE = (
    "card_count",
    "stage_c_completed",
    "stage_c_skipped_current",
    "stage_c_fetch_failures",
    "stage_c_throttled",
    "stage_d_join_key_votes",
    "stage_d_fallback_votes",
    "stage_d_slow_path_routed",
    "consensus_changed",
    "peak_rss_mb",
    "elapsed_s",
)
# Short headers: the ledger key with its stage prefix dropped, so the numeric columns stay narrow.
HEADERS = {
    "card_count": "cards",
    "stage_c_completed": "C done",
    "stage_c_skipped_current": "C current",
    "stage_c_fetch_failures": "C fetch fail",
    "stage_c_throttled": "C throttled",
    "stage_d_join_key_votes": "D join key",
    "stage_d_fallback_votes": "D fallback",
    "stage_d_slow_path_routed": "D slow path",
    "consensus_changed": "consensus changed",
    "peak_rss_mb": "peak RSS MB",
    "elapsed_s": "elapsed s",
}


def _parse_since(text: str | None) -> datetime | None:
    if not text:
        return None
    units = {"m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return datetime.now(timezone.utc) - timedelta(seconds=int(text[:-1]) * units[text[-1]])
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--since {text!r}: use an ISO time (2026-12-01T08:00) or an age such as 30m, 6h, 2d") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def ledger(
    since: Annotated[str | None, typer.Option("--since", help="ISO time, or an age: 30m, 6h, 2d.")] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every ledger column, the run id and the whole note.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List micro-batches from Dagster's event log, oldest first, with cards per hour."""
    entries = ledger_entries(open_instance(settings()), since=_parse_since(since))
    rate = cards_per_hour(entries)
    if as_json:
        print_json(
            {
                "cards_per_hour": rate,
                "batches": [
                    {
                        "batch_key": e.batch_key,
                        "run_id": e.run_id,
                        "status": e.status,
                        "at": datetime.fromtimestamp(e.at, timezone.utc).isoformat(),
                        **e.fields,
                    }
                    for e in entries
                ],
            }
        )
        return
    if not entries:
        typer.echo("no micro-batches in the ledger" + (f" since {since}" if since else ""))
        return
    shown = SHOWN_WIDE if wide else SHOWN
    columns = ["batch", "status", "trigger", "try", *(HEADERS[k] for k in shown), "trip / failure"]
    grid = table(*columns, *(["run"] if wide else []), ids=("batch", "run"))
    for e in entries:
        f = e.fields
        note = str(f.get("failure_reason") or f.get("lockout_trip_id") or f.get("envelope_trip_id") or "")
        if f.get("stopped_early"):
            done, held = f.get("cards_done"), f.get("card_count")
            note = f"stopped by trip {f.get('stopped_by_trip')}: {done} of {held} cards done"
        row = [e.batch_key, e.status, str(f.get("trigger_reason", "")), str(f.get("attempt", "")),
               *(str(f.get(k, "")) for k in shown)]
        row += [note, e.run_id or ""] if wide else [clipped(note)]
        grid.add_row(*row)
    print_table(grid)
    typer.echo(f"{len(entries)} batches; " + (f"{rate:.0f} cards per hour" if rate else "no completed batch yet"))
