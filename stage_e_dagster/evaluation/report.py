"""Evaluation results as one flat JSON object (the CLI renders the tables, `cli/evaluate.py`)."""

from __future__ import annotations

from typing import Any


def flatten(sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """All sections' keys in one object (each section's keys are distinct by construction)."""
    flat: dict[str, Any] = {}
    for values in sections.values():
        flat.update(values)
    return flat

