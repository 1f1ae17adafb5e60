"""The workspace file the commands hand to ``dagster dev`` and the daemon, written from package data.

The ``workspace.yaml`` is written into the state folder on every use, so an installed wheel works
from any folder (the instance's own ``dagster.yaml`` is written by ``defs.instance.open_instance``).
"""

from __future__ import annotations

from pathlib import Path

from ..instance_files import WORKSPACE_YAML, read_instance_file
from ..settings import Settings


def workspace_file(cfg: Settings) -> Path:
    """A ``workspace.yaml`` for the daemon and ``dagster dev``, refreshed from package data every call."""
    target = cfg.state_dir / WORKSPACE_YAML
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(read_instance_file(WORKSPACE_YAML), encoding="utf-8")
    return target
