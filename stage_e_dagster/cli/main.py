"""Root of the ``stage-e`` command: wires the command modules and turns known errors into one line."""

from __future__ import annotations

import os
import sys

import typer

from ..catalog.engine import DatabaseUrlError
from ..settings import SettingsError
from . import batches, db, trips
from .bulk import bulk
from .catalog import app as catalog_app
from .demo import demo
from .errors import CliError
from .evaluate import evaluate
from .ledger import ledger
from .seed import seed
from .status import status
from .sweep import sweep
from .vote import vote

app = typer.Typer(
    name="stage-e",
    help="Operate the stage-e card identification pipeline.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    # Typer 0.29's Rich help panel prints every option's type, so each flag (``--help`` too) reads
    # ``--json <bool>``; its plain formatter leaves flags bare. Every sub-app sets the same.
    rich_markup_mode=None,
)
app.add_typer(db.app, name="db")
app.add_typer(trips.app, name="trips")
app.command()(status)
app.command()(ledger)
app.command()(sweep)
app.command()(demo)
app.add_typer(batches.app, name="batches")
app.add_typer(catalog_app, name="catalog")
app.command()(vote)
app.command()(seed)
app.command()(evaluate)
app.command()(bulk)

KNOWN_ERRORS = (CliError, SettingsError, DatabaseUrlError)


def main() -> None:
    """Entry point: known errors print one line to stderr and exit 1; ``STAGE_E_DEBUG=1`` shows tracebacks."""
    try:
        app(standalone_mode=False)
    except KNOWN_ERRORS as exc:
        if os.environ.get("STAGE_E_DEBUG"):
            raise
        typer.echo(f"stage-e: error: {exc}", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("stage-e: aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback, the shell's usual code for SIGINT
        typer.echo("stage-e: interrupted", err=True)
        sys.exit(130)
    except typer.TyperException as exc:  # bad flags or arguments: usage and one line
        show = getattr(exc, "show", None)
        if show is None:
            typer.echo(f"stage-e: error: {exc}", err=True)
        else:
            show()
        sys.exit(getattr(exc, "exit_code", 2))
