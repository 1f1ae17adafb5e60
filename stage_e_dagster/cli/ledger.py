"""``stage-e ledger``: the micro-batches Dagster's event log recorded, with throughput."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..defs.instance import open_instance
from ..defs.ledger import cards_per_hour, ledger_entries
from .context import settings
from .errors import CliError

SHOWN = (
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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List micro-batches from Dagster's event log, oldest first, with cards per hour."""
    entries = ledger_entries(open_instance(settings()), since=_parse_since(since))
    rate = cards_per_hour(entries)
    if as_json:
        typer.echo(
            json.dumps(
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
                },
                indent=2,
                default=str,
            )
        )
        return
    if not entries:
        typer.echo("no micro-batches in the ledger" + (f" since {since}" if since else ""))
        return
    table = Table("batch", "status", "trigger", "try", *SHOWN, "trip / failure")
    for e in entries:
        f = e.fields
        note = f.get("failure_reason") or f.get("lockout_trip_id") or f.get("envelope_trip_id") or ""
        table.add_row(
            e.batch_key,
            e.status,
            str(f.get("trigger_reason", "")),
            str(f.get("attempt", "")),
            *(str(f.get(k, "")) for k in SHOWN),
            str(note)[:60],
        )
    console = Console()
    console.print(table)
    console.print(f"{len(entries)} batches; " + (f"{rate:.0f} cards per hour" if rate else "no completed batch yet"))
