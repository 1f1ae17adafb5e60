"""Where the Dagster instance lives for the CLI and the demo: ``DAGSTER_HOME``, or the state folder;
and its storage, created before any Dagster process starts on it.

The state folder's ``dagster.yaml`` is written from the package's own copy, so an installed wheel
works from any folder. The checkout paths below are for tests and benchmarks run from a checkout.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dagster import DagsterInstance

from ..dispatch.slots import ACK_ROOM
from ..instance_files import INSTANCE_YAML, read_instance_file
from ..settings import Settings
from .tags import PARTITION_TAG

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EMBEDDED_INSTANCE_YAML = PROJECT_ROOT / "dagster.yaml"
WORKSPACE_YAML = PROJECT_ROOT / "workspace.yaml"


def dagster_home(settings: Settings) -> Path:
    """``DAGSTER_HOME`` when set; else the state folder's, given the embedded dagster.yaml on first use with
    its run queue's caps set for the dispatch cap (``with_run_queue_cap``)."""
    configured = os.environ.get("DAGSTER_HOME")
    if configured:
        return Path(configured)
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    target = home / INSTANCE_YAML
    if not target.exists():
        target.write_text(with_run_queue_cap(read_instance_file(INSTANCE_YAML), settings), encoding="utf-8")
    return home


def with_run_queue_cap(instance_yaml: str, settings: Settings) -> str:
    """The instance file with its run-queue caps set for ``STAGE_E_MAX_CONCURRENT_DISPATCHES``: the cap plus
    the acknowledge job's room on runs of every job, the cap itself on dispatch runs (the tag limit)."""
    cap = settings.max_concurrent_dispatches
    text, count = re.subn(r"(?m)^(\s*max_concurrent_runs:) *-?\d+ *$", rf"\g<1> {cap + ACK_ROOM}", instance_yaml)
    if count != 1:
        raise ValueError("the instance file has no max_concurrent_runs line to set")
    text, count = re.subn(rf"(?m)^(\s*- key: {re.escape(PARTITION_TAG)}\n\s*limit:) *\d+ *$", rf"\g<1> {cap}", text)
    if count != 1:
        raise ValueError(f"the instance file has no tag limit on {PARTITION_TAG} to set")
    return text


def create_instance_storage(home: Path) -> None:
    """Create the instance's storage under ``home`` (or check it is current) in this one process, before
    any Dagster process starts on it.

    A webserver, a daemon and a code server started together on an empty home each create the storage
    they find missing, and two of them can both stamp the schedule storage's Alembic revision; every
    process after that fails its revision check. Opening the instance once first leaves nothing to create.
    """
    with DagsterInstance.from_config(str(home)):
        pass


def open_instance(settings: Settings) -> DagsterInstance:
    home = dagster_home(settings)
    os.environ["DAGSTER_HOME"] = str(home)
    return DagsterInstance.get()
