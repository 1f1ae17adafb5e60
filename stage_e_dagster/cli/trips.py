"""``stage-e trips``: list trips, open a manual one, and acknowledge one (the only way to resume)."""

from __future__ import annotations

import getpass
from typing import Annotated, Any

import typer

from ..catalog.engine import session_scope
from ..catalog.models import EnvelopeTrip
from ..envelope.trips import TripError, acknowledge_trip, list_trips, open_trip
from .context import catalog_engine
from .errors import CliError
from .output import print_json, print_table, table

app = typer.Typer(help="Envelope trips: what halted dispatch, and resuming it.", no_args_is_help=True,
                  rich_markup_mode=None)


def trip_dict(trip: EnvelopeTrip) -> dict[str, Any]:
    return {
        "trip_id": trip.trip_id,
        "bar": trip.bar,
        "detail": trip.detail,
        "run_id": trip.run_id,
        "tripped_at": trip.tripped_at.isoformat(),
        "acknowledged_at": trip.acknowledged_at.isoformat() if trip.acknowledged_at else None,
        "acknowledged_by": trip.acknowledged_by,
        "acknowledged_note": trip.acknowledged_note,
    }


def _default_person() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@app.command("list")
def list_command(
    open_only: Annotated[bool, typer.Option("--open", help="Only unacknowledged trips.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Add the run and the acknowledgement note.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List trips, newest first."""
    with session_scope(catalog_engine()) as session:
        trips = [trip_dict(t) for t in list_trips(session, open_only=open_only)]
    if as_json:
        print_json(trips)
        return
    if not trips:
        typer.echo("no open trips" if open_only else "no trips")
        return
    columns = ["trip id", "bar", "reading / ceiling", "tripped at (UTC)", "acked"]
    if wide:
        columns += ["run", "note"]
    grid = table(*columns, ids=("trip id", "run"))
    for t in trips:
        detail = t["detail"] or {}
        reading = (
            f"{detail.get('observed')} / {detail.get('ceiling')}" if "observed" in detail else detail.get("note", "")
        )
        if detail.get("cause"):
            reading = f"{reading}: {str(detail['cause'])[:120]}"
        acked = f"{t['acknowledged_at'][:19]} by {t['acknowledged_by']}" if t["acknowledged_at"] else "OPEN"
        row = [t["trip_id"], t["bar"], str(reading), t["tripped_at"][:19].replace("T", " "), acked]
        if wide:
            row += [t["run_id"] or "", t["acknowledged_note"] or ""]
        grid.add_row(*row)
    print_table(grid)


@app.command("open")
def open_command(
    note: Annotated[str, typer.Option("--note", help="Why dispatch is paused (required).")],
    by: Annotated[str, typer.Option("--by", help="Who opens it.")] = "",
) -> None:
    """Open a manual trip: pause all dispatch (for maintenance, say)."""
    if not note.strip():
        raise CliError("opening a manual trip needs a non-empty --note")
    with session_scope(catalog_engine()) as session:
        trip = open_trip(session, "manual", {"note": note.strip(), "opened_by": by or _default_person()})
        trip_id = trip.trip_id
    typer.echo(f"opened {trip_id} (bar manual): all new dispatch is halted until it is acknowledged")


@app.command("ack")
def ack_command(
    trip_id: Annotated[str, typer.Argument(help="The trip to acknowledge, e.g. envtrip-20260101T000000-abcd1234.")],
    note: Annotated[str, typer.Option("--note", help="What was checked or fixed (required).")],
    by: Annotated[str, typer.Option("--by", help="Who acknowledges; defaults to the login name.")] = "",
) -> None:
    """Acknowledge a trip. Dispatch resumes once no trip is open."""
    try:
        with session_scope(catalog_engine()) as session:
            trip = acknowledge_trip(session, trip_id, note=note, by=by or _default_person())
            summary = f"acknowledged {trip.trip_id} (bar {trip.bar}, tripped {trip.tripped_at:%Y-%m-%d %H:%M:%S} UTC)"
            given = (trip.detail or {}).get("given_back")
            if given is not None:
                summary += (f"\ngiven back to the Stage C backlog: {given['parked_cards']} parked card(s), "
                            f"{given['extractor_error_cards']} card(s) read with an extractor error")
    except TripError as exc:
        raise CliError(str(exc)) from exc
    typer.echo(summary)
    typer.echo(
        "fetch outcomes recorded before this acknowledgement no longer count toward any bar: "
        "a new trip needs new failures (or load still over the hard bar after steering)"
    )
