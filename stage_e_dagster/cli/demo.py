"""``stage-e demo``: the synthetic corpus on the embedded catalogue, streamed through real Dagster runs.

It seeds the catalogue (once), turns streaming on for its own child processes only, and starts
``dg dev`` (UI on 127.0.0.1:3000, or ``--port``) or, headless, the daemon alone until the
backlog drains. Ctrl-C or SIGTERM stops the children in order and leaves none behind.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Annotated

import sqlalchemy as sa
import typer
from dagster import DagsterInstance
from sqlalchemy.orm import Session

from ..catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING, backlog_count
from ..catalog.engine import session_scope
from ..catalog.migrate import upgrade
from ..catalog.models import Card, EnvelopeTrip, ImageEvidence, MicroBatch, PrintingVote
from ..corpus.seed import seed_corpus
from ..defs.dagster_internals import DG_CLI_MODULE, daemon_environment
from ..defs.instance import create_instance_storage, dagster_home, open_instance
from ..defs.run_ends import runs_in_progress
from ..envelope.signals import CpuPressure
from ..evaluation.labels import load_labels
from ..evaluation.stage_c import evaluate_stage_c
from ..evaluation.stage_d import evaluate_stage_d
from ..process_groups import kill_what_is_left, signal_group, start_group, wait_group_gone
from ..settings import Settings
from .context import catalog_engine, settings
from .errors import CliError
from .instance import dg_project_folder, workspace_file
from .output import percent, progress_bar

DEMO_LOAD_FACTOR = 3
# Broken uploads in the demo corpus, to show their named outcomes. They are the cards' own problem
# (``rejected``), so they never count toward the fetch-failure bar.
DEMO_BROKEN_SHARE = 0.02
UI_HOST = "127.0.0.1"
# How long ``dg dev`` (or the daemon) gets to shut its own children down after the interrupt;
# dg dev waits for the webserver and the daemon in turn before it exits.
STOP_GRACE_S = 60.0
# Then a run worker still finishing its batch (it outlives dg dev) gets this long before SIGTERM.
DRAIN_S = 30.0


def _stop_on_sigterm() -> None:
    """Turn SIGTERM (and SIGINT) into KeyboardInterrupt so the demo stops its children before it exits."""

    def handler(signum: int, frame: object) -> None:
        # Once is enough: a second Ctrl-C while the children shut down must not cut that short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (a port only in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def dagster_command(*args: str) -> list[str]:
    """A Dagster CLI run by this interpreter, as ``dg dev`` starts its own children: no script on PATH needed."""
    return [sys.executable, "-m", *args]


# Runs a console script by its name through this interpreter, as the script pip writes would.
_RUN_CONSOLE_SCRIPT = (
    "import sys; from importlib.metadata import entry_points; "
    "sys.exit(entry_points(group='console_scripts', name=sys.argv.pop(1))[0].load()())"
)


def daemon_command(workspace: str) -> list[str]:
    """``dagster-daemon run``, the daemon's public command: the script in this interpreter's own scripts
    folder (the venv's ``bin``) whatever PATH says, or, where dagster's scripts were not installed
    beside it, the same entry point run by this interpreter."""
    script = Path(sysconfig.get_path("scripts")) / "dagster-daemon"
    if script.is_file():
        return [str(script), "run", "-w", workspace]
    return [sys.executable, "-c", _RUN_CONSOLE_SCRIPT, "dagster-daemon", "run", "-w", workspace]


def child_environment(cfg: Settings, corpus_dir: Path) -> dict[str, str]:
    """The environment of ``dg dev`` or the headless daemon: streaming on, this demo's catalogue and
    images, and what a daemon needs to keep a sweep going while its code server restarts."""
    env = daemon_environment(os.environ)
    roots = os.pathsep.join(dict.fromkeys([str(corpus_dir), *(str(r) for r in cfg.image_roots)]))
    if "STAGE_E_HOST_LOAD_CEILING" not in os.environ:
        # Without PSI the governor reads the load average: the demo's own OCR runs load a small
        # machine past one load unit per core; leave headroom so the demo shows streaming, and keep
        # the bar (it still trips on a real overload). Where PSI is read, this bar is not used.
        env["STAGE_E_HOST_LOAD_CEILING"] = str(DEMO_LOAD_FACTOR * (os.cpu_count() or 1) + 2)
    env.update(
        STAGE_E_STREAMING_ENABLED="true",
        STAGE_E_DATABASE_URL=cfg.database_url,
        STAGE_E_STATE_DIR=str(cfg.state_dir),
        STAGE_E_IMAGE_ROOTS=roots,
        DAGSTER_HOME=str(dagster_home(cfg)),
    )
    return env


def stop_process_group(proc: subprocess.Popen[bytes], *, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a child started in its own process group, and everything it started.

    Only the leader is interrupted first (SIGINT): ``dg dev`` and the daemon then shut their
    webserver, daemon and code servers down through Dagster's own shutdown pipes, which is quiet.
    Interrupting the whole group at once would make every child print a traceback and fail a run
    being launched. A run worker still busy afterwards may finish its batch for ``DRAIN_S``;
    whatever is left in the group then gets SIGTERM, then SIGKILL.

    The daemon always stops before the code server it calls (``dg dev`` waits for it first; headless, it
    stops its own code server last). What a sensor tick in flight does at the stop is decided inside the
    daemon, not here: the instance files keep the sensors out of a thread pool for it (``dagster.yaml``).
    """
    pgid = proc.pid
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    if not wait_group_gone(pgid, DRAIN_S):
        signal_group(pgid, signal.SIGTERM)
        kill_what_is_left(pgid, 10.0, after_kill_s=10.0)
    if proc.poll() is None:
        proc.wait()


def _count(session: Session, model: type, *where: sa.ColumnElement[bool]) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(model).where(*where)).scalar_one()


def snapshot(engine: sa.Engine, instance: DagsterInstance) -> dict[str, int]:
    """The catalogue's counts, and the Dagster runs not yet ended."""
    runs = runs_in_progress(instance)
    with session_scope(engine) as session:
        return {
            "runs_in_progress": runs,
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


def _has_cards(engine: sa.Engine) -> bool:
    with session_scope(engine) as session:
        return session.execute(sa.select(Card.id).limit(1)).first() is not None


def _print_accuracy(engine: sa.Engine, labels_path: Path) -> None:
    """How the streamed results compare with the corpus's ground truth (what `stage-e evaluate` reports)."""
    labels = load_labels(labels_path)
    c = evaluate_stage_c(engine, labels)
    d = evaluate_stage_d(engine, labels)

    typer.echo(
        f"against the labels: collector number {percent(c['collector_number_accuracy'])}, "
        f"set code {percent(c['set_code_accuracy'])}, machine-vote precision {percent(d['vote_precision'])}, "
        f"coverage {percent(d['coverage'])}, wrong resolutions {d['wrong_resolutions']}"
    )


# What a drain still holds while any of these counts is above 0, with the words a timeout uses.
HELD = {"stage_c_backlog": "stage C backlog", "stage_d_backlog": "stage D backlog",
        "in_flight": "batches in flight", "runs_in_progress": "runs not ended"}


def is_idle(snap: dict[str, int]) -> bool:
    """Nothing waiting, no batch in flight, and every run ended.

    A batch is marked succeeded inside Stage D, a moment before its run logs the materialization
    and ends: stopping the daemon's group on the catalogue alone could kill that run and leave the
    ledger one micro-batch short.
    """
    return not any(snap[key] for key in HELD)


def still_held(snap: dict[str, int]) -> str:
    """What an unfinished drain still holds, for the timeout's message."""
    return ", ".join(f"{words} {snap[key]}" for key, words in HELD.items() if snap[key]) or "nothing left"


def demo(
    headless: Annotated[bool, typer.Option("--headless", help="Run the daemon without the UI.")] = False,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Stop once the backlog has drained (headless).")
    ] = False,
    cards: Annotated[int, typer.Option("--cards", min=1, help="Cards in the synthetic corpus (first run only).")] = 60,
    seed: Annotated[int, typer.Option("--seed", help="Corpus seed (first run only).")] = 7,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds before --until-idle gives up.")] = 900,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="UI port on 127.0.0.1 (not headless).")] = 3000,
) -> None:
    """Seed the synthetic corpus and stream it through Dagster: the main job of this project."""
    if until_idle and not headless:
        raise CliError("--until-idle needs --headless")
    # dg dev would print the URL, fail to bind and go on without a UI: refuse before starting anything.
    if not headless and port_in_use(UI_HOST, port):
        raise CliError(f"port {port} on {UI_HOST} is already in use: stop what listens there or pass --port N")
    cfg = settings()
    engine = catalog_engine(cfg, require_schema=False)
    upgrade(engine)
    corpus_dir = cfg.state_dir / "demo-corpus"
    if not _has_cards(engine):
        typer.echo(f"seeding {cards} synthetic cards into {corpus_dir} ...")
        with progress_bar("rendering cards", cards) as bar:
            seed_corpus(engine, corpus_dir, cards=cards, seed=seed, broken_share=DEMO_BROKEN_SHARE,
                        progress=bar.advance)
    env = child_environment(cfg, corpus_dir)
    # Before any Dagster process starts: started together on an empty home, they can create it twice.
    create_instance_storage(Path(env["DAGSTER_HOME"]))
    workspace = str(workspace_file(cfg))
    dg_project_folder(cfg)
    if CpuPressure(cfg.cpu_pressure_file).read() is not None:
        bars = f"CPU pressure bars {cfg.cpu_pressure_soft_bar:g}/{cfg.cpu_pressure_ceiling:g} %"
    else:
        bars = f"host load bar {env.get('STAGE_E_HOST_LOAD_CEILING', cfg.host_load_ceiling)}"
    typer.echo(f"streaming on for the demo's processes; {bars}")
    _stop_on_sigterm()
    if not headless:
        # ``dg dev`` with a workspace file: the same webserver, daemon and code server as ``dagster dev``,
        # without its SupersessionWarning, and no pyproject.toml needed (an installed wheel has none).
        cmd = dagster_command(DG_CLI_MODULE, "dev", "-w", workspace, "-h", UI_HOST, "-p", str(port))
        typer.echo(f"starting dg dev: UI on http://{UI_HOST}:{port} (Ctrl-C stops it)")
        ui = start_group(cmd, env=env)
        interrupted = False
        try:
            ui.wait()
        except KeyboardInterrupt:
            interrupted = True
            typer.echo("stopping dg dev and its processes ...")
        finally:
            stop_process_group(ui)
        if not interrupted and ui.returncode != 0:
            raise CliError(f"dg dev exited with code {ui.returncode}; its log is above")
        typer.echo("dg dev stopped")
        return

    instance = open_instance(cfg)  # the DAGSTER_HOME the daemon is given
    log_path = cfg.state_dir / "demo-daemon.log"
    typer.echo(f"starting the Dagster daemon headless (log: {log_path})")
    with open(log_path, "ab") as log:
        daemon = start_group(
            daemon_command(workspace),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    started = time.monotonic()
    last_line = ""
    try:
        while True:
            time.sleep(2)
            if daemon.poll() is not None:
                raise CliError(f"the Dagster daemon exited with code {daemon.returncode}; see {log_path}")
            snap = snapshot(engine, instance)
            line = (
                f"[{time.monotonic() - started:5.0f} s] stage C backlog {snap['stage_c_backlog']}, "
                f"stage D backlog {snap['stage_d_backlog']}, batches in flight {snap['in_flight']}, "
                f"runs in progress {snap['runs_in_progress']}, done {snap['batches_succeeded']}, "
                f"open trips {snap['open_trips']}"
            )
            if line.split("] ", 1)[1] != last_line:
                typer.echo(line)
                last_line = line.split("] ", 1)[1]
            if until_idle and is_idle(snap):
                break
            if until_idle and snap["open_trips"]:
                raise CliError("an envelope trip opened during the demo: see `stage-e trips list`")
            if until_idle and time.monotonic() - started > timeout:
                raise CliError(
                    f"the backlog did not drain within {timeout:.0f} s ({still_held(snap)}); see {log_path}"
                )
    except KeyboardInterrupt:
        typer.echo("interrupted: stopping the Dagster daemon ...")
    finally:
        stop_process_group(daemon)
    elapsed = time.monotonic() - started
    snap = snapshot(engine, instance)
    instance.dispose()
    labels_path = corpus_dir / "labels.jsonl"
    if labels_path.exists():
        _print_accuracy(engine, labels_path)
    typer.echo(
        f"demo idle after {elapsed:.0f} s: {snap['cards']} cards, {snap['batches_succeeded']} batches succeeded, "
        f"{snap['batches_failed']} failed or abandoned, {snap['evidence_rows']} evidence rows, "
        f"{snap['machine_votes']} machine votes, {snap['resolved']} resolved (machine votes alone resolve nothing), "
        f"{snap['cards'] / elapsed:.2f} cards/s"
    )
