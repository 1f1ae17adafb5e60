"""How every command prints: pretty JSON, one percentage format, tables whose ids are never cut, progress bars.

Identifiers (trip ids, batch keys, run ids) are what an operator copies into the next command, so
their columns never wrap or shorten; the other columns give way.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

# The widest a table is measured at when nothing bounds it (output to a file or a pipe).
UNBOUNDED_WIDTH = 10_000


def print_json(data: Any) -> None:
    """Listing output for scripts: indented, keys in the order the command built them."""
    typer.echo(json.dumps(data, indent=2, default=str))


def percent(fraction: float | None) -> str:
    """The one percentage format of the CLI: ``12.5%``; ``-`` when there is nothing to divide."""
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def clipped(text: str, width: int = 60) -> str:
    """``text`` cut to ``width`` characters with an ellipsis, for a default-width table cell."""
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def table(*columns: str, ids: tuple[str, ...] = ()) -> Table:
    """A table whose ``ids`` columns keep every character on one line, whatever the terminal width.

    Rich narrows wrapping columns first when a table is too wide, so an id column that may not wrap
    only gives way when the ids alone are wider than the terminal, and then it folds, never cuts.
    """
    grid = Table()
    for name in columns:
        grid.add_column(name, no_wrap=name in ids, overflow="fold")
    return grid


def print_table(grid: Table) -> None:
    """At the terminal's width; piped or redirected with no ``COLUMNS`` set, at the table's own width,
    so a file or a pager gets one line per row instead of Rich's 80-column fallback."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        natural = Measurement.get(console, console.options.update_width(UNBOUNDED_WIDTH), grid).maximum
        console = Console(width=max(console.width, natural))
    console.print(grid)


@dataclass
class Ticker:
    """What a long command tells its progress bar: cards (or records) done so far."""

    _progress: Progress
    _task: Any

    def advance(self, count: int = 1) -> None:
        self._progress.advance(self._task, count)

    def done_so_far(self, count: int) -> None:
        self._progress.update(self._task, completed=count)


@contextmanager
def progress_bar(label: str, total: int | None, *, quiet: bool = False) -> Iterator[Ticker]:
    """A progress bar on stderr; off when stderr is not a terminal or the command prints JSON.

    ``total=None`` shows a spinner and a count instead of a bar (a stream of unknown length).
    """
    console = Console(stderr=True)
    shown = not quiet and sys.stderr.isatty()
    if total is None:
        columns: tuple[Any, ...] = (SpinnerColumn(), TextColumn(label), TextColumn("{task.completed:.0f}"),
                                    TimeElapsedColumn())
    else:
        columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not shown) as progress:
        yield Ticker(progress, progress.add_task(label, total=total))
