"""How every command prints: pretty JSON, one percentage format, tables whose ids are never cut, progress bars
with a rate and an estimate of the time left.

Identifiers (trip ids, batch keys, run ids) are what an operator copies into the next command, so
their columns never wrap or shorten; the other columns give way.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

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


def eta_seconds(elapsed_s: float | None, fraction_done: float | None) -> float | None:
    """Seconds left at the average pace so far; ``None`` until some work is done (or with no way to tell)."""
    if elapsed_s is None or fraction_done is None or fraction_done <= 0:
        return None
    if fraction_done >= 1:
        return 0.0
    return elapsed_s * (1 - fraction_done) / fraction_done


def _fraction_done(task: Task) -> float | None:
    """From the total when there is one, else from the ``fraction`` a stream reports (bytes read of its file)."""
    if task.total:
        return task.completed / task.total
    fraction = task.fields.get("fraction")
    return float(fraction) if fraction is not None else None


class RateColumn(ProgressColumn):
    """Items per second over the whole run so far (steadier than the last few seconds for batched work)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        if not elapsed or not task.completed:
            return Text(f"- {self.unit}/s")
        return Text(f"{task.completed / elapsed:,.1f} {self.unit}/s")


class EtaColumn(ProgressColumn):
    """``eta H:MM:SS`` at the average pace so far; ``eta -`` until it can tell."""

    def render(self, task: Task) -> Text:
        left = eta_seconds(task.elapsed, _fraction_done(task))
        return Text("eta -" if left is None else f"eta {timedelta(seconds=round(left))}")


def progress_columns(label: str, total: int | None, unit: str) -> tuple[ProgressColumn, ...]:
    """A bar with done/total when the total is known, else a spinner and a count; then the rate, the time
    spent and the time left."""
    if total is None:
        head: tuple[ProgressColumn, ...] = (SpinnerColumn(), TextColumn(label), TextColumn("{task.completed:,.0f}"))
    else:
        head = (TextColumn(label), BarColumn(), MofNCompleteColumn())
    return (*head, RateColumn(unit), TimeElapsedColumn(), EtaColumn())


@dataclass
class Ticker:
    """What a long command tells its progress bar: cards (or records) done so far."""

    _progress: Progress
    _task: Any

    def advance(self, count: int = 1) -> None:
        self._progress.advance(self._task, count)

    def done_so_far(self, count: int, fraction: float | None = None) -> None:
        """``fraction``: the share of the work done, for a stream of unknown length (e.g. bytes read of its file)."""
        if fraction is None:
            self._progress.update(self._task, completed=count)
        else:
            self._progress.update(self._task, completed=count, fraction=fraction)


@contextmanager
def progress_bar(label: str, total: int | None, *, unit: str = "cards", quiet: bool = False) -> Iterator[Ticker]:
    """A progress bar on stderr; off when stderr is not a terminal or the command prints JSON.

    ``total=None`` shows a spinner and a count instead of a bar (a stream of unknown length); its time
    left shows once the caller reports a ``fraction`` done. ``unit`` names what is counted, per second.
    """
    console = Console(stderr=True)
    shown = not quiet and sys.stderr.isatty()
    with Progress(*progress_columns(label, total, unit), console=console, transient=True,
                  disable=not shown) as progress:
        yield Ticker(progress, progress.add_task(label, total=total))
