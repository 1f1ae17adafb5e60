"""Where the Dagster instance lives for the CLI and the demo: ``DAGSTER_HOME``, or the state folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dagster import DagsterInstance

from ..settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EMBEDDED_INSTANCE_YAML = PROJECT_ROOT / "dagster.yaml"
WORKSPACE_YAML = PROJECT_ROOT / "workspace.yaml"


def dagster_home(settings: Settings) -> Path:
    """``DAGSTER_HOME`` when set; else the state folder's, given the embedded dagster.yaml on first use."""
    configured = os.environ.get("DAGSTER_HOME")
    if configured:
        return Path(configured)
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if not target.exists():
        shutil.copyfile(EMBEDDED_INSTANCE_YAML, target)
    return home


def open_instance(settings: Settings) -> DagsterInstance:
    home = dagster_home(settings)
    os.environ["DAGSTER_HOME"] = str(home)
    return DagsterInstance.get()
