"""Ground-truth labels: one JSON object per line, keyed by the card's ``identifier``.

Only ``identifier`` is required; every other field is optional, so a golden set may label just
what it knows (for instance only set code and collector number).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


class LabelFileError(ValueError):
    """The label file cannot be read or a line is not a JSON object with an identifier."""


def load_labels(path: Path) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LabelFileError(f"cannot read label file {path}: {exc.strerror or exc}") from None
    labels: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LabelFileError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("identifier"), str):
            raise LabelFileError(f"{path}:{number}: expected an object with a string 'identifier'")
        labels.append(row)
    return labels


def read_csv_rows(path: Path, required: tuple[str, ...], what: str = "label file") -> list[dict[str, str]]:
    """The rows of a CSV file with a header; an unreadable file or a missing column is a
    :class:`LabelFileError` naming ``what`` and the file."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise LabelFileError(f"{path}: missing column(s) {', '.join(missing)}")
            return list(reader)
    except OSError as exc:
        raise LabelFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
