"""``stage-e status``: is streaming on, is a trip open, how much waits, and the envelope's readings."""

from __future__ import annotations

import json
from typing import Annotated, Any

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from ..catalog.backlog import (
    STAGE_C_PENDING,
    STAGE_D_PENDING,
    backlog_count,
    oldest_waiting_since,
    waiting_on_configuration,
)
from ..catalog.base import utcnow
from ..catalog.engine import masked_url, session_scope
from ..catalog.heartbeats import (
    MIN_COUNTED_INTERVAL_S,
    STALE_AFTER_INTERVALS,
    concurrent_tickers,
    effective_settings,
    is_stale,
    read_heartbeats,
    settings_differences,
)
from ..catalog.models import MicroBatch
from ..envelope.bars import Ceilings
from ..envelope.fetch_window import window_counts
from ..envelope.signals import host_load
from ..envelope.trips import current_open_trip
from ..settings import REFUSING_SETTINGS, Settings
from .context import catalog_engine, settings
from .trips import trip_dict


def running_system(session: Session, cfg: Settings) -> dict[str, Any]:
    """What the daemon's sensors last recorded, beside this shell's own settings.

    The daemon's settings are those of the newest heartbeat. ``stale`` lists the sensors that missed
    ``STALE_AFTER_INTERVALS`` ticks in a row; ``differences`` maps a setting to (daemon, shell);
    ``side_by_side`` maps a sensor to the processes ticking it at once (two daemons on one instance).
    """
    now = utcnow()
    beats = read_heartbeats(session)
    own = effective_settings(cfg)
    sensors = [
        {
            "sensor": beat.sensor_name,
            "ticked_at": beat.ticked_at.isoformat(timespec="seconds"),
            "age_s": round((now - beat.ticked_at).total_seconds(), 1),
            "interval_s": beat.interval_s,
            "stale": is_stale(beat, now),
            "ticked_by": beat.ticked_by,
        }
        for beat in beats
    ]
    newest = beats[0] if beats else None
    differences = settings_differences(newest.settings, own) if newest else {}
    return {
        "daemon_settings": newest.settings if newest else None,
        "governed_concurrency": newest.governed_limit if newest else None,
        "shell_settings": own,
        "differences": {name: {"daemon": daemon, "shell": shell} for name, (daemon, shell) in differences.items()},
        "sensors": sensors,
        "stale": [row["sensor"] for row in sensors if row["stale"]],
        "side_by_side": concurrent_tickers(session, now),
    }


def collect_status() -> dict[str, Any]:
    cfg = settings()
    ceilings = Ceilings.from_settings(cfg)
    with session_scope(catalog_engine(cfg)) as session:
        trip = current_open_trip(session)
        since = oldest_waiting_since(session)
        counts = window_counts(session, ceilings.fetch_failure_window)
        in_flight = session.execute(
            sa.select(sa.func.count()).select_from(MicroBatch).where(MicroBatch.status.in_(("pending", "running")))
        ).scalar_one()
        last_peak = session.execute(
            sa.select(MicroBatch.peak_rss_mb)
            .where(MicroBatch.peak_rss_mb.is_not(None))
            .order_by(MicroBatch.finished_at.desc())
            .limit(1)
        ).scalar_one_or_none()
        return {
            "streaming_enabled": cfg.streaming_enabled,
            "database": masked_url(cfg.database_url),
            "open_trip": trip_dict(trip) if trip else None,
            "stage_c_backlog": backlog_count(session, STAGE_C_PENDING),
            "stage_d_backlog": backlog_count(session, STAGE_D_PENDING),
            "waiting_on_configuration": waiting_on_configuration(session, REFUSING_SETTINGS),
            "oldest_waiting_age_s": round((utcnow() - since).total_seconds(), 1) if since else None,
            "batches_in_flight": in_flight,
            "running_system": running_system(session, cfg),
            "envelope": {
                "fetch_lockout": {"open": bool(trip and trip.bar == "fetch_lockout")},
                "host_load": {"reading": host_load(), "ceiling": ceilings.host_load},
                "rss_mb": {"reading": last_peak, "ceiling": ceilings.rss_mb, "source": "last batch's peak"},
                "fetch_failures": {
                    "reading": counts.failures,
                    "window_total": counts.total,
                    "window": ceilings.fetch_failure_window,
                    "ceiling": ceilings.max_fetch_failures,
                },
            },
        }


def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show whether streaming is on, any open trip, the backlogs and the envelope's readings."""
    info = collect_status()
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    console = Console()
    trip = info["open_trip"]
    console.print(f"catalogue        {info['database']}")
    console.print(f"streaming        {'ON' if info['streaming_enabled'] else 'off (STAGE_E_STREAMING_ENABLED=false)'}")
    console.print(
        f"open trip        {trip['trip_id'] + ' (' + trip['bar'] + ')' if trip else 'none'}",
    )
    age = info["oldest_waiting_age_s"]
    console.print(f"stage C backlog  {info['stage_c_backlog']}")
    console.print(f"stage D backlog  {info['stage_d_backlog']}")
    for setting, count in info["waiting_on_configuration"].items():
        console.print(f"waiting on configuration  {count} card(s), refused by the settings: change {setting} "
                      "(they are tried again once it changes)")
    console.print(f"oldest waiting   {'-' if age is None else f'{age:.0f} s'}")
    console.print(f"batches in flight {info['batches_in_flight']}")
    env = info["envelope"]
    table = Table("bar", "reading", "ceiling")
    table.add_row("fetch lockout", "open trip" if env["fetch_lockout"]["open"] else "none", "any 403")
    load = env["host_load"]["reading"]
    table.add_row("host load (1 min)", "-" if load is None else f"{load:.2f}", f"{env['host_load']['ceiling']:g}")
    rss = env["rss_mb"]["reading"]
    table.add_row(
        "worker RSS MB (last batch peak)", "-" if rss is None else f"{rss:.0f}", f"{env['rss_mb']['ceiling']:g}"
    )
    ff = env["fetch_failures"]
    table.add_row(
        f"fetch failures (last {ff['window']})",
        f"{ff['reading']} of {ff['window_total']}",
        f"> {ff['ceiling']:g} trips",
    )
    console.print(table)
    _print_running_system(console, info["running_system"])


def _print_running_system(console: Console, system: dict[str, Any]) -> None:
    """The daemon's settings beside the shell's, then a warning for each difference and stale sensor."""
    if not system["sensors"]:
        console.print("daemon           no sensor has ticked on this catalogue with streaming on: is the Dagster "
                      "daemon running, with STAGE_E_STREAMING_ENABLED=true?",
                      soft_wrap=True)
        return
    daemon, shell = system["daemon_settings"], system["shell_settings"]
    table = Table("setting", "daemon", "this shell")
    for name in shell:
        table.add_row(name, _shown(daemon.get(name)), _shown(shell[name]))
    governed = system["governed_concurrency"]
    table.add_row("governed concurrency", _shown(governed), "-")
    console.print(table)
    ticks = Table("sensor", "last tick", "age", "interval", "ticked by")
    for row in system["sensors"]:
        age = f"{row['age_s']:.0f} s" + (" (stale)" if row["stale"] else "")
        ticks.add_row(row["sensor"], row["ticked_at"], age, f"{row['interval_s']} s", row["ticked_by"])
    console.print(ticks)
    for name, values in system["differences"].items():
        console.print(
            f"warning: {name} differs: the daemon runs with {_shown(values['daemon'])}, "
            f"this shell has {_shown(values['shell'])}",
            soft_wrap=True,
        )
    for sensor, tickers in system["side_by_side"].items():
        console.print(
            f"warning: {len(tickers)} processes tick {sensor} side by side ({', '.join(tickers)}): two Dagster "
            "daemons (or `dagster dev` beside a daemon) on one instance; Dagster supports one daemon per "
            "instance, so stop all but one",
            soft_wrap=True,
        )
    for row in system["sensors"]:
        if row["stale"]:
            console.print(
                f"warning: {row['sensor']} has not ticked for {row['age_s']:.0f} s (more than "
                f"{STALE_AFTER_INTERVALS} x its interval, counted as at least {MIN_COUNTED_INTERVAL_S} s): "
                "is the daemon running, the sensor on?",
                soft_wrap=True,
            )


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)
