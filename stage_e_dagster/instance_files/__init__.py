"""The Dagster files the commands need, shipped inside the package so an installed wheel has them.

``dagster.yaml`` (the embedded instance), ``workspace.yaml`` (the code location) and ``dg.toml``
(a ``dg`` project for an installed wheel) are read with importlib.resources. The copies of the
first two at the top of the checkout are for ``dg dev -w workspace.yaml`` run there, and a test
keeps them identical to these.
"""

from __future__ import annotations

from importlib.resources import files

INSTANCE_YAML = "dagster.yaml"
WORKSPACE_YAML = "workspace.yaml"
DG_TOML = "dg.toml"


def read_instance_file(name: str) -> str:
    """The text of one shipped file: :data:`INSTANCE_YAML`, :data:`WORKSPACE_YAML` or :data:`DG_TOML`."""
    return files(__name__).joinpath(name).read_text(encoding="utf-8")
