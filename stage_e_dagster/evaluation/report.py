"""Render evaluation results: one Rich table per section, or one flat JSON object."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def flatten(sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """All sections' keys in one object (each section's keys are distinct by construction)."""
    flat: dict[str, Any] = {}
    for values in sections.values():
        flat.update(values)
    return flat


def render_tables(console: Console, sections: dict[str, dict[str, Any]]) -> None:
    for title, values in sections.items():
        table = Table(title=title)
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in values.items():
            shown = "n/a" if value is None else (f"{value:.2%}" if key.endswith("_accuracy") else str(value))
            table.add_row(key, shown)
        console.print(table)
