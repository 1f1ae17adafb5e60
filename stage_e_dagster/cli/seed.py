"""``stage-e seed``: render the synthetic labelled corpus and load it into the catalogue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..corpus.seed import seed_corpus
from .context import catalog_engine, settings
from .errors import CliError


def seed(
    cards: Annotated[int, typer.Option("--cards", help="How many card images to render.")] = 200,
    out: Annotated[Path, typer.Option("--out", help="Folder for images/ and labels.jsonl.")] = Path("corpus"),
    seed_value: Annotated[int, typer.Option("--seed", help="Random seed; the same seed gives the same corpus.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Render a synthetic labelled corpus and load its catalogue and cards."""
    if cards < 1:
        raise CliError("--cards must be at least 1")
    cfg = settings()
    out_dir = out.expanduser().resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"--out {out_dir} exists and is not a folder")
    summary = seed_corpus(catalog_engine(cfg), out_dir, cards=cards, seed=seed_value)
    roots_ok = any(out_dir == r or out_dir.is_relative_to(r) for r in cfg.image_roots)
    data = {
        "cards": summary.cards, "printings": summary.printings, "expansions": summary.expansions,
        "images_dir": str(summary.images_dir), "labels": str(summary.labels_path), "broken": summary.broken,
        "custom_art": summary.custom_art, "old_frame": summary.old_frame, "image_roots_include_out": roots_ok,
    }
    if as_json:
        typer.echo(json.dumps(data, sort_keys=True))
        return
    typer.echo(f"seeded {summary.cards} cards ({summary.printings} printings in {summary.expansions} sets) "
               f"under {summary.images_dir}; labels in {summary.labels_path}")
    if not roots_ok:
        typer.echo(f"note: Stage C only reads files under STAGE_E_IMAGE_ROOTS; add {out_dir} to it "
                   f"(e.g. export STAGE_E_IMAGE_ROOTS={out_dir})", err=True)
