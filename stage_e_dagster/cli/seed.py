"""``stage-e seed``: render the synthetic labelled corpus and load it into the catalogue."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from ..corpus.seed import seed_corpus
from ..settings import Settings
from .context import catalog_engine, settings
from .errors import CliError
from .output import progress_bar


def corpus_folder(cfg: Settings, out: Path | None) -> Path:
    """Where the corpus goes: ``out``, or ``corpus`` in the first image root.

    Refuses a folder outside ``STAGE_E_IMAGE_ROOTS``: Stage C would refuse every image in it, and
    the cards would wait in the backlog until the setting allowed them.
    """
    if out is None:
        if not cfg.image_roots:
            raise CliError("STAGE_E_IMAGE_ROOTS names no folder; set it, or give --out under one of its folders")
        return (cfg.image_roots[0] / "corpus").resolve()
    out_dir = out.expanduser().resolve()
    if not any(out_dir == root or out_dir.is_relative_to(root) for root in cfg.image_roots):
        roots = os.pathsep.join(str(r) for r in cfg.image_roots) or "(none)"
        raise CliError(f"--out {out_dir} is outside STAGE_E_IMAGE_ROOTS ({roots}), so Stage C could not read "
                       f"its images; give --out under one of them or add {out_dir} to STAGE_E_IMAGE_ROOTS")
    return out_dir


def seed(
    cards: Annotated[int, typer.Option("--cards", help="How many card images to render.")] = 200,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for images/ and labels.jsonl, under STAGE_E_IMAGE_ROOTS "
                                   "(default: corpus/ in its first folder)."),
    ] = None,
    seed_value: Annotated[int, typer.Option("--seed", help="Random seed; the same seed gives the same corpus.")] = 0,
    photo_like: Annotated[bool, typer.Option(
        "--photo-like", help="Render phone-photo-like uploads, one condition per card in turn (collector-line "
                             "formats, borders, languages, tilt, blur, glare, sleeves, clutter, JPEG, low "
                             "resolution); each label names its condition.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Render a synthetic labelled corpus and load its catalogue and cards."""
    if cards < 1:
        raise CliError("--cards must be at least 1")
    cfg = settings()
    out_dir = corpus_folder(cfg, out)
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"--out {out_dir} exists and is not a folder")
    engine = catalog_engine(cfg)
    with progress_bar("rendering cards", cards, quiet=as_json) as bar:
        summary = seed_corpus(engine, out_dir, cards=cards, seed=seed_value, progress=bar.advance,
                              photo_like=photo_like)
    data = {
        "cards": summary.cards, "printings": summary.printings, "expansions": summary.expansions,
        "images_dir": str(summary.images_dir), "labels": str(summary.labels_path), "broken": summary.broken,
        "custom_art": summary.custom_art, "old_frame": summary.old_frame, "image_roots_include_out": True,
    }
    if as_json:
        typer.echo(json.dumps(data, sort_keys=True))
        return
    typer.echo(f"seeded {summary.cards} cards ({summary.printings} printings in {summary.expansions} sets) "
               f"under {summary.images_dir}; labels in {summary.labels_path}")
