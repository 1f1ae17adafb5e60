"""``stage-e catalog``: load the canonical catalogue of real printings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..catalog_import.art_hashes import SCRYFALL_RATE_PER_SEC, count_pending, hash_art
from ..catalog_import.scryfall import ScryfallImportError, import_scryfall
from ..catalog_import.set_symbols import count_pending as count_pending_symbols
from ..catalog_import.set_symbols import fetch_symbols
from ..stage_c.fetch import ImageFetcher
from .context import catalog_engine, settings
from .errors import CliError
from .output import progress_bar

app = typer.Typer(help="The canonical catalogue: expansions and printings.", no_args_is_help=True,
                  rich_markup_mode=None)


@app.command("import-scryfall")
def import_scryfall_command(
    file: Annotated[Path, typer.Argument(
        help="Scryfall card data, read as a stream: a bulk file (e.g. default-cards), JSON Lines, "
             "one card object or an API list page.")],
    sets: Annotated[Path | None, typer.Option(
        "--sets", help="Scryfall /sets JSON, for every set code and release date.")] = None,
    images: Annotated[Path | None, typer.Option(
        "--images", help="Folder of local card images named <scryfall id>.jpg|.png|.webp to hash art from.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Upsert expansions and printings from a Scryfall card file; importing it again adds nothing."""
    for label, path in (("FILE", file), ("--sets", sets)):
        if path is not None and not path.is_file():
            raise CliError(f"{label} {path} is not a readable file")
    if images is not None and not images.is_dir():
        raise CliError(f"--images {images} is not a folder")
    try:
        engine = catalog_engine()
        with progress_bar(f"importing {file.name}: records read", None, unit="records", quiet=as_json) as bar:
            report = import_scryfall(engine, file, sets_path=sets, images_dir=images, progress=bar.done_so_far)
    except ScryfallImportError as exc:  # names the file it is about: FILE or --sets
        raise CliError(str(exc)) from None
    summary = report.as_dict()
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    skipped = ", ".join(f"{k} {v}" for k, v in summary["skipped"].items()) or "none"
    typer.echo(
        f"read {report.records_read} records ({report.shape}): {report.printings_inserted} printings added, "
        f"{report.printings_updated} updated, {report.expansions_inserted} expansions added, "
        f"{report.art_hashed} art hashes; skipped: {skipped}"
    )
    for example in report.skip_examples:
        typer.echo(f"  skipped {example}")


@app.command("hash-art")
def hash_art_command(
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Hash at most this many printings.")] = None,
    rate: Annotated[float, typer.Option(
        "--rate", min=0.1, max=SCRYFALL_RATE_PER_SEC,
        help="Requests per second to the image host, across every process (Scryfall's limit, 10, at most).")
    ] = SCRYFALL_RATE_PER_SEC,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fetch each imported printing's art crop from Scryfall and store its art hash, for the fallback.

    Resumable: printings already hashed (from the same URL) are skipped, failures stay pending for
    the next run. The image host must be in STAGE_E_FETCH_ALLOWED_HOSTS (cards.scryfall.io). A 403
    stops the run at once; the hashes stored before it stay.
    """
    cfg = settings()
    engine = catalog_engine(cfg)
    pending = count_pending(engine)
    total = pending if limit is None else min(pending, limit)
    with ImageFetcher(engine=engine, image_roots=(), allowed_hosts=cfg.fetch_allowed_hosts,
                      timeout_s=cfg.fetch_timeout_s, max_bytes=cfg.fetch_max_bytes, rate_per_sec=rate) as fetcher, \
            progress_bar("hashing art crops", total, unit="images", quiet=as_json) as bar:
        report = hash_art(engine, fetcher, limit=limit, progress=bar.advance)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        failed = ", ".join(f"{k} {v}" for k, v in sorted(report.failed.items())) or "none"
        typer.echo(f"hashed {report.hashed} of {report.pending} pending printings in {report.elapsed_s:.1f} s "
                   f"({report.rate_per_sec:.1f}/s); throttled {report.throttled}; failed: {failed}")
    if report.stopped is not None:
        raise CliError(f"hash-art stopped ({report.stopped}): {report.stop_detail}; "
                       f"{report.hashed} hashes stored, run it again to resume")


@app.command("fetch-symbols")
def fetch_symbols_command(
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Render at most this many sets.")] = None,
    rate: Annotated[float, typer.Option(
        "--rate", min=0.1, max=SCRYFALL_RATE_PER_SEC,
        help="Requests per second to the icon host, across every process (Scryfall's limit, 10, at most).")
    ] = SCRYFALL_RATE_PER_SEC,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fetch each imported set's symbol icon (icon_svg_uri, from `import-scryfall --sets`), render it and store
    its shape, for Stage D to compare the symbol a card prints with.

    Resumable: sets already rendered (from the same URI) are skipped; a failed fetch or an icon that is not
    a drawable SVG (bad-svg) stays pending for the next run. The icon host must be in
    STAGE_E_FETCH_ALLOWED_HOSTS (svgs.scryfall.io). A 403 stops the run at once; the shapes stored stay.
    """
    cfg = settings()
    engine = catalog_engine(cfg)
    pending = count_pending_symbols(engine)
    total = pending if limit is None else min(pending, limit)
    with ImageFetcher(engine=engine, image_roots=(), allowed_hosts=cfg.fetch_allowed_hosts,
                      timeout_s=cfg.fetch_timeout_s, max_bytes=cfg.fetch_max_bytes, rate_per_sec=rate) as fetcher, \
            progress_bar("rendering set symbols", total, unit="sets", quiet=as_json) as bar:
        report = fetch_symbols(engine, fetcher, limit=limit, progress=bar.advance)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        failed = ", ".join(f"{k} {v}" for k, v in sorted(report.failed.items())) or "none"
        typer.echo(f"rendered {report.rendered} of {report.pending} pending sets in {report.elapsed_s:.1f} s; "
                   f"throttled {report.throttled}; failed: {failed}")
    if report.stopped is not None:
        raise CliError(f"fetch-symbols stopped ({report.stopped}): {report.stop_detail}; "
                       f"{report.rendered} shapes stored, run it again to resume")
