"""The Dagster instance and workspace the commands use, written from the files the package ships.

With ``DAGSTER_HOME`` unset, the instance lives in the state folder; its ``dagster.yaml`` and the
``workspace.yaml`` that ``dagster dev`` and the daemon load are written there from package data
on first use, so an installed wheel works from any folder.
"""

from __future__ import annotations

from pathlib import Path

from dagster import DagsterInstance

from ..defs.instance import open_instance
from ..instance_files import WORKSPACE_YAML, read_instance_file
from ..settings import Settings


def dagster_instance(cfg: Settings) -> DagsterInstance:
    return open_instance(cfg)


def workspace_file(cfg: Settings) -> Path:
    """A ``workspace.yaml`` for the daemon and ``dagster dev``, refreshed from package data every call."""
    target = cfg.state_dir / WORKSPACE_YAML
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(read_instance_file(WORKSPACE_YAML), encoding="utf-8")
    return target
