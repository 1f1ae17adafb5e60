"""The files the commands hand to ``dg dev`` and the daemon, written from package data.

The ``workspace.yaml`` is written into the state folder on every use, so an installed wheel works
from any folder (the instance's own ``dagster.yaml`` is written by ``defs.instance.open_instance``).
``dg_project_folder`` gives an installed wheel what a checkout's pyproject.toml gives ``dg``.
"""

from __future__ import annotations

from pathlib import Path

from ..instance_files import DG_TOML, WORKSPACE_YAML, read_instance_file
from ..settings import Settings

DG_FOLDER = "dg"


def workspace_file(cfg: Settings) -> Path:
    """A ``workspace.yaml`` for the daemon and ``dg dev``, refreshed from package data every call."""
    target = cfg.state_dir / WORKSPACE_YAML
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(read_instance_file(WORKSPACE_YAML), encoding="utf-8")
    return target


def dg_project_folder(cfg: Settings) -> Path:
    """``<state>/dg``: a ``dg.toml`` and a link to the imported package, so ``dg check defs`` and
    ``dg list defs`` run there; ``dg`` looks for the project's module files under the folder it runs in."""
    folder = cfg.state_dir / DG_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DG_TOML).write_text(read_instance_file(DG_TOML), encoding="utf-8")
    link = folder / "stage_e_dagster"
    package = Path(__file__).resolve().parents[1]  # the stage_e_dagster package this runs from
    if link.is_symlink() and link.resolve() != package:
        link.unlink()  # a state folder used by another install of the package
    if not link.is_symlink():
        link.symlink_to(package, target_is_directory=True)
    return folder
