"""``stage-e demo``: the synthetic corpus on the embedded catalogue, streamed through real Dagster runs.

It seeds the catalogue (once), turns streaming on for its own child processes only, and starts
``dagster dev`` (UI on 127.0.0.1:3000) or, headless, the daemon alone until the backlog drains.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import sqlalchemy as sa
import typer
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING, backlog_count
from ..catalog.engine import session_scope
from ..catalog.migrate import upgrade
from ..catalog.models import Card, EnvelopeTrip, ImageEvidence, MicroBatch, PrintingVote
from ..corpus.seed import seed_corpus
from ..defs.instance import WORKSPACE_YAML, dagster_home
from ..evaluation.labels import load_labels
from ..evaluation.stage_c import evaluate_stage_c
from ..evaluation.stage_d import evaluate_stage_d
from ..settings import Settings
from .context import catalog_engine, settings
from .errors import CliError

DEMO_LOAD_FACTOR = 3
# Broken uploads in the demo corpus, to show their named outcomes. They are the cards' own problem
# (``rejected``), so they never count toward the fetch-failure bar.
DEMO_BROKEN_SHARE = 0.02


def _reset_signals() -> None:
    # A background shell starts children with SIGINT ignored; dagster would then ignore Ctrl-C and
    # SIGTERM. The child gets its own process group so stopping it stops its code servers too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setpgrp()


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so the demo stops its children before it exits."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def child_environment(cfg: Settings, corpus_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    roots = os.pathsep.join(dict.fromkeys([str(corpus_dir), *(str(r) for r in cfg.image_roots)]))
    if "STAGE_E_HOST_LOAD_CEILING" not in os.environ:
        # The demo's own OCR runs load a small machine past one load unit per core; leave headroom
        # so the demo shows streaming, and keep the bar (it still trips on a real overload).
        env["STAGE_E_HOST_LOAD_CEILING"] = str(DEMO_LOAD_FACTOR * (os.cpu_count() or 1) + 2)
    env.update(
        STAGE_E_STREAMING_ENABLED="true",
        STAGE_E_DATABASE_URL=cfg.database_url,
        STAGE_E_STATE_DIR=str(cfg.state_dir),
        STAGE_E_IMAGE_ROOTS=roots,
        DAGSTER_HOME=str(dagster_home(cfg)),
    )
    return env


def stop_process_group(proc: subprocess.Popen[bytes], *, grace_s: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _count(session: Session, model: type, *where: sa.ColumnElement[bool]) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(model).where(*where)).scalar_one()


def _snapshot(engine: sa.Engine) -> dict[str, int]:
    with session_scope(engine) as session:
        return {
            "cards": _count(session, Card),
            "stage_c_backlog": backlog_count(session, STAGE_C_PENDING),
            "stage_d_backlog": backlog_count(session, STAGE_D_PENDING),
            "in_flight": _count(session, MicroBatch, MicroBatch.status.in_(("pending", "running"))),
            "batches_succeeded": _count(session, MicroBatch, MicroBatch.status == "succeeded"),
            "batches_failed": _count(session, MicroBatch, MicroBatch.status.in_(("failed", "abandoned"))),
            "evidence_rows": _count(session, ImageEvidence),
            "machine_votes": _count(session, PrintingVote, PrintingVote.source == "ocr"),
            "resolved": _count(session, Card, Card.printing_status == "resolved"),
            "open_trips": _count(session, EnvelopeTrip, EnvelopeTrip.acknowledged_at.is_(None)),
        }


def _print_accuracy(engine: sa.Engine, labels_path: Path) -> None:
    """How the streamed results compare with the corpus's ground truth (what `stage-e evaluate` reports)."""
    labels = load_labels(labels_path)
    c = evaluate_stage_c(engine, labels)
    d = evaluate_stage_d(engine, labels)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}%"

    typer.echo(
        f"against the labels: collector number {pct(c['collector_number_accuracy'])}, "
        f"set code {pct(c['set_code_accuracy'])}, machine-vote precision {pct(d['vote_precision'])}, "
        f"coverage {pct(d['coverage'])}, wrong resolutions {d['wrong_resolutions']}"
    )


def _idle(snap: dict[str, int]) -> bool:
    return snap["stage_c_backlog"] == 0 and snap["stage_d_backlog"] == 0 and snap["in_flight"] == 0


def demo(
    headless: Annotated[bool, typer.Option("--headless", help="Run the daemon without the UI.")] = False,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Stop once the backlog has drained (headless).")
    ] = False,
    cards: Annotated[int, typer.Option("--cards", min=1, help="Cards in the synthetic corpus (first run only).")] = 60,
    seed: Annotated[int, typer.Option("--seed", help="Corpus seed (first run only).")] = 7,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds before --until-idle gives up.")] = 900,
    port: Annotated[int, typer.Option("--port", help="UI port (not headless).")] = 3000,
) -> None:
    """Seed the synthetic corpus and stream it through Dagster: the main job of this project."""
    if until_idle and not headless:
        raise CliError("--until-idle needs --headless")
    cfg = settings()
    engine = catalog_engine(cfg, require_schema=False)
    upgrade(engine)
    corpus_dir = cfg.state_dir / "demo-corpus"
    if _snapshot(engine)["cards"] == 0:
        typer.echo(f"seeding {cards} synthetic cards into {corpus_dir} ...")
        seed_corpus(engine, corpus_dir, cards=cards, seed=seed, broken_share=DEMO_BROKEN_SHARE)
    env = child_environment(cfg, corpus_dir)
    load_bar = env.get("STAGE_E_HOST_LOAD_CEILING", cfg.host_load_ceiling)
    typer.echo(f"streaming on for the demo's processes; host load bar {load_bar}")
    _stop_on_sigterm()
    if not headless:
        cmd = [
            os.path.join(os.path.dirname(sys.executable), "dagster"),
            "dev",
            "-w",
            str(WORKSPACE_YAML),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ]
        typer.echo(f"starting dagster dev: UI on http://127.0.0.1:{port} (Ctrl-C stops it)")
        ui = subprocess.Popen(cmd, env=env, preexec_fn=_reset_signals)
        try:
            ui.wait()
        except KeyboardInterrupt:
            typer.echo("stopping dagster dev")
        finally:
            stop_process_group(ui)
        return

    log_path = cfg.state_dir / "demo-daemon.log"
    typer.echo(f"starting the Dagster daemon headless (log: {log_path})")
    with open(log_path, "ab") as log:
        daemon = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "dagster-daemon"), "run", "-w", str(WORKSPACE_YAML)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_reset_signals,
        )
    started = time.monotonic()
    last_line = ""
    try:
        while True:
            time.sleep(2)
            if daemon.poll() is not None:
                raise CliError(f"the Dagster daemon exited with code {daemon.returncode}; see {log_path}")
            snap = _snapshot(engine)
            line = (
                f"[{time.monotonic() - started:5.0f} s] stage C backlog {snap['stage_c_backlog']}, "
                f"stage D backlog {snap['stage_d_backlog']}, batches in flight {snap['in_flight']}, "
                f"done {snap['batches_succeeded']}, open trips {snap['open_trips']}"
            )
            if line.split("] ", 1)[1] != last_line:
                typer.echo(line)
                last_line = line.split("] ", 1)[1]
            if until_idle and _idle(snap):
                break
            if until_idle and snap["open_trips"]:
                raise CliError("an envelope trip opened during the demo: see `stage-e trips list`")
            if until_idle and time.monotonic() - started > timeout:
                raise CliError(f"the backlog did not drain within {timeout:.0f} s; see {log_path}")
    except KeyboardInterrupt:
        typer.echo("interrupted")
    finally:
        stop_process_group(daemon)
    elapsed = time.monotonic() - started
    snap = _snapshot(engine)
    labels_path = corpus_dir / "labels.jsonl"
    if labels_path.exists():
        _print_accuracy(engine, labels_path)
    typer.echo(
        f"demo idle after {elapsed:.0f} s: {snap['cards']} cards, {snap['batches_succeeded']} batches succeeded, "
        f"{snap['batches_failed']} failed or abandoned, {snap['evidence_rows']} evidence rows, "
        f"{snap['machine_votes']} machine votes, {snap['resolved']} resolved (machine votes alone resolve nothing), "
        f"{snap['cards'] / elapsed:.2f} cards/s"
    )
