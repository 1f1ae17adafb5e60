"""``stage-e bulk``: run a stage over its whole backlog at full speed, outside the envelope.

BULK mode is an operator's tool: it is not gated by the streaming flag and opens no trips. Beside
streaming it leaves alone the cards a live dispatch batch holds (their run does them). Each stage
registers a runner in :data:`STAGE_RUNNERS`.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Callable, Sequence

import sqlalchemy as sa
import typer

from ..catalog.backlog import requeue_config_refused
from ..catalog.engine import session_scope
from ..catalog.models import Card
from ..settings import Settings, settings_fingerprint
from ..stage_c.fetch import ImageFetcher
from ..stage_c.pool import run_stage_c_pool
from ..stage_c.run import run_stage_c
from .bulk_stage_d import chain_stages, run_bulk_stage_d, stage_d_total
from .context import catalog_engine, settings
from .errors import CliError
from .output import progress_bar

StageRunner = Callable[[sa.Engine, Settings, "Sequence[int] | None", int | None, str, Callable[[int], None]],
                       dict[str, Any]]


def bulk_writer_id() -> str:
    return "bulk:" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def stage_c_total(engine: sa.Engine, card_ids: Sequence[int] | None) -> int:
    if card_ids is not None:
        return len(card_ids)
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(Card).where(Card.stage_c_pending)).scalar_one())


def run_bulk_stage_c(engine: sa.Engine, cfg: Settings, card_ids: Sequence[int] | None, limit: int | None,
                     writer: str, advance: Callable[[int], None], *, workers: int = 1) -> dict[str, Any]:
    requeue_all_config_refused(engine, cfg)
    if workers > 1:
        report = run_stage_c_pool(cfg, card_ids, workers=workers, writer=writer, run_id=writer, limit=limit,
                                  progress=advance, skip_leased=True)
    else:
        fetcher = ImageFetcher.from_settings(cfg, engine)
        try:
            report = run_stage_c(engine, card_ids, writer=writer, run_id=writer, fetcher=fetcher, limit=limit,
                                 progress=advance, skip_leased=True, ocr_pass=cfg.ocr_pass)
        finally:
            fetcher.close()
    data = {k: v for k, v in vars(report).items() if k not in ("lockout", "deferred_card_ids")}
    data["deferred"] = len(report.deferred_card_ids)
    data["lockout"] = None if report.lockout is None else {
        "host": report.lockout.host, "status_code": report.lockout.status_code, "card_id": report.lockout.card_id}
    return data


def requeue_all_config_refused(engine: sa.Engine, cfg: Settings) -> int:
    """Cards refused under other settings than these go back in the backlog this pass reads."""
    fingerprint = settings_fingerprint(cfg)
    total = 0
    while True:
        with session_scope(engine) as session:
            requeued = requeue_config_refused(session, fingerprint)
        total += requeued
        if not requeued:
            return total


STAGE_RUNNERS: dict[str, tuple[Callable[[sa.Engine, Sequence[int] | None], int], StageRunner]] = {
    "c": (stage_c_total, run_bulk_stage_c),
    "d": (stage_d_total, run_bulk_stage_d),
}
STAGE_RUNNERS["all"] = chain_stages(STAGE_RUNNERS["c"], STAGE_RUNNERS["d"])


def read_card_ids(path: Path) -> list[int]:
    """Card ids from a file: integers separated by whitespace or commas; '#' starts a comment."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read --card-ids file {path}: {exc.strerror or exc}") from None
    ids: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for token in line.split("#", 1)[0].replace(",", " ").split():
            if not token.isdigit():
                raise CliError(f"{path}:{number}: {token!r} is not a card id")
            ids.append(int(token))
    return list(dict.fromkeys(ids))


def bulk(
    stage: Annotated[str, typer.Option("--stage", help="Which stage to run: " + ", ".join(STAGE_RUNNERS))] = "c",
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Stop after this many cards.")] = None,
    card_ids_file: Annotated[Path | None, typer.Option("--card-ids", help="File of card ids to process.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Stage C worker processes.")] = 1,
) -> None:
    """Run a stage over its backlog (or the given cards) at full speed, with a progress bar and a summary.

    Beside streaming, Stage C skips every card a live dispatch batch holds (counted as left to it)."""
    if stage not in STAGE_RUNNERS:
        raise CliError(f"unknown --stage {stage!r}; expected one of: {', '.join(STAGE_RUNNERS)}")
    if workers > 1 and stage not in ("c", "all"):
        raise CliError("--workers applies to Stage C only (--stage c or all)")
    card_ids = read_card_ids(card_ids_file) if card_ids_file is not None else None
    cfg = settings()
    engine = catalog_engine(cfg)
    count, runner = STAGE_RUNNERS[stage]
    if workers > 1:
        stage_c = (stage_c_total, partial(run_bulk_stage_c, workers=workers))
        count, runner = stage_c if stage == "c" else chain_stages(stage_c, STAGE_RUNNERS["d"])
    total = count(engine, card_ids)
    if limit is not None:
        total = min(total, limit)
    writer = bulk_writer_id()
    started = time.monotonic()
    with progress_bar(f"stage {stage}", total, quiet=as_json) as bar:
        result = runner(engine, cfg, card_ids, limit, writer, bar.advance)
    result = {"stage": stage, "writer": writer, **result}
    if as_json:
        typer.echo(json.dumps(result, sort_keys=True))
    else:
        for line in summary_lines(result, time.monotonic() - started):
            typer.echo(line)
        refused = result.get("config_refused") or (result.get("stage_c") or {}).get("config_refused")
        if refused:
            typer.echo(f"note: {refused} card(s) refused by the settings wait on configuration (see `stage-e status`);"
                       " the warnings above name the variable to fix (STAGE_E_IMAGE_ROOTS or "
                       "STAGE_E_FETCH_ALLOWED_HOSTS); they are tried again once it changes", err=True)
    if result.get("lockout"):
        raise typer.Exit(code=2)


def _stage_c_line(report: dict[str, Any]) -> str:
    return (
        f"Stage C: {report['attempted']} cards attempted, {report['completed']} got evidence, "
        f"{report['skipped_current']} already current, {report['terminal']} terminal "
        f"({report['rejected']} broken uploads), {report['fetch_failures']} fetch failures, "
        f"{report['throttled']} throttled, {report['deferred']} deferred, "
        f"{report['config_refused']} refused by the settings, {report['not_yet_eligible']} still backing off, "
        f"{report.get('claimed_elsewhere', 0)} left to a dispatch batch in flight"
    )


def _stage_d_line(report: dict[str, Any]) -> str:
    return (
        f"Stage D: {report['cards_considered']} cards considered, {report['join_key_votes']} join-key votes, "
        f"{report['fallback_votes']} fallback votes, {report['slow_path_routed']} routed to the slow path, "
        f"{report['abstentions']} abstentions, {report['consensus_changed']} consensus changes"
    )


def summary_lines(result: dict[str, Any], elapsed_s: float) -> list[str]:
    """The report a person reads at the end of ``bulk``: one line per stage, then a lockout if one stopped it."""
    lines = [f"bulk --stage {result['stage']} finished in {elapsed_s:.1f} s (writer {result['writer']})"]
    if result["stage"] == "c":
        lines.append("  " + _stage_c_line(result))
    elif result["stage"] == "d":
        lines.append("  " + _stage_d_line(result))
    else:
        lines += ["  " + _stage_c_line(result["stage_c"]), "  " + _stage_d_line(result["stage_d"])]
    lockout = result.get("lockout")
    if lockout:
        lines.append(
            f"  stopped: {lockout['host']} answered {lockout['status_code']} (lockout) on card {lockout['card_id']}; "
            "the rest of Stage C's backlog was left for later"
        )
    return lines
