"""``stage-e evaluate LABELS``: how stored evidence and votes compare with a ground-truth label file.

Each stage contributes one section through :data:`EVALUATORS`; adding a stage is one entry.
``stage-e evaluate FOLDER`` (a folder of photos with a ``labels.csv``) runs both stages on the
photos in a scratch catalogue built from the labels and prints per-photo and total figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Callable

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.table import Table

from ..evaluation.conditions import scores_by_condition
from ..evaluation.labels import LabelFileError, load_labels
from ..evaluation.photos import PhotoResult, evaluate_photo_folder, photo_totals
from ..evaluation.report import flatten
from ..evaluation.stage_c import evaluate_stage_c
from ..evaluation.stage_d import evaluate_stage_d
from .context import catalog_engine
from .errors import CliError
from .output import percent, print_table, table

Evaluator = Callable[[sa.Engine, list[dict[str, Any]]], dict[str, Any]]

EVALUATORS: dict[str, Evaluator] = {
    "Stage C evidence": evaluate_stage_c,
    "Stage D votes": evaluate_stage_d,
}


def is_fraction(key: str) -> bool:
    """Figures that are shares of a count (accuracies, precisions, coverage), shown as percentages."""
    return key.endswith(("_accuracy", "_precision")) or key == "coverage"


def section_table(title: str, values: dict[str, Any]) -> Table:
    grid = Table(title=title)
    grid.add_column("metric", overflow="fold")
    grid.add_column("value", justify="right")
    for key, value in values.items():
        grid.add_row(key, percent(value) if is_fraction(key) else ("-" if value is None else str(value)))
    return grid


def by_table(rows: list[dict[str, Any]]) -> Table:
    grid = table("condition", "cards", "number right", "set right", "votes", "wrong votes", "by art",
                 ids=("condition",))
    for r in rows:
        grid.add_row(r["condition"], str(r["cards"]), f"{r['number_right']}/{r['number_printed']}",
                     f"{r['set_right']}/{r['set_printed']}", str(r["votes"]), str(r["wrong_votes"]),
                     str(r["fallback_votes"]))
    return grid


def photo_table(results: list[PhotoResult]) -> Table:
    grid = Table(title="Photos")
    grid.add_column("file", no_wrap=True)  # a file name is an id: never cut
    for column in ("label", "read", "number", "set", "join key", "fallback", "votes", "rests on", "wrong"):
        grid.add_column(column, overflow="fold")
    for r in results:
        read = f"{r.read_set or '-'}/{r.read_number or '-'}"
        kind = " (several)" if r.label.multi else " (render)" if r.label.render else ""
        grid.add_row(r.label.file + kind, f"{r.label.set_code}/{r.label.number}", read,
                     "right" if r.number_right else "wrong", "right" if r.set_right else "wrong",
                     r.outcome or "-", fallback_cell(r), ", ".join(r.votes) or "-", ", ".join(r.readings) or "-",
                     str(r.wrong_votes))
    return grid


def fallback_cell(r: PhotoResult) -> str:
    """The fallback's outcome, with the printings that still fit when it abstained for several."""
    return f"{r.fallback} ({', '.join(r.still_fit)})" if r.fallback and r.still_fit else r.fallback or "-"


def evaluate_folder(folder: Path, labels: Path | None, as_json: bool, set_symbols: Path | None = None) -> None:
    try:
        results = evaluate_photo_folder(folder, labels, set_symbols=set_symbols)
    except LabelFileError as exc:
        raise CliError(str(exc)) from None
    totals = photo_totals(results)
    if as_json:
        typer.echo(json.dumps({"totals": totals, "photos": [
            {"file": r.label.file, "set": r.label.set_code, "collector_number": r.label.number,
             "read_set": r.read_set, "read_number": r.read_number, "number_right": r.number_right,
             "set_right": r.set_right, "join_key": r.outcome, "fallback": r.fallback, "fallback_still_fit": r.still_fit,
             "votes": r.votes,
             "vote_readings": r.readings,
             "wrong_votes": r.wrong_votes, "several_cards": r.label.multi, "render": r.label.render}
            for r in results]}, sort_keys=True))
        return
    console = Console()
    console.print(photo_table(results))
    console.print(section_table("Totals", totals))


def evaluate(
    labels: Annotated[Path, typer.Argument(
        help="Label file (one JSON object per line with an 'identifier'), or a folder of photos with labels.csv.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one flat JSON object.")] = False,
    by: Annotated[str | None, typer.Option(
        "--by", help="One row per value of this label field (e.g. condition, from `seed --photo-like`): "
                     "numbers and set codes read right, votes and wrong votes.")] = None,
    labels_csv: Annotated[Path | None, typer.Option(
        "--labels", help="With a folder: its labels CSV (default FOLDER/labels.csv).")] = None,
    set_symbols: Annotated[Path | None, typer.Option(
        "--set-symbols", help="With a folder: a folder of <set code>.svg icons for the scratch catalogue's sets "
                              "(what `stage-e catalog fetch-symbols` stores from Scryfall).")] = None,
) -> None:
    """Report accuracy of the stored evidence (and votes) against LABELS, or run the stages on a folder of photos."""
    if labels.is_dir():
        evaluate_folder(labels, labels_csv, as_json, set_symbols)
        return
    try:
        rows = load_labels(labels)
    except LabelFileError as exc:
        raise CliError(str(exc)) from None
    engine = catalog_engine()
    if by is not None:
        if not any(by in row for row in rows):
            raise CliError(f"no label in {labels} has a field {by!r}")
        scores = scores_by_condition(engine, rows, field=by)
        if as_json:
            typer.echo(json.dumps(scores, indent=2))
        else:
            print_table(by_table(scores))
        return
    sections = {title: evaluator(engine, rows) for title, evaluator in EVALUATORS.items()}
    if as_json:
        typer.echo(json.dumps(flatten(sections), sort_keys=True))
    else:
        console = Console()
        for title, values in sections.items():
            console.print(section_table(title, values))
