"""``dispatch/`` decides without Dagster (issue 40, part 9): no module of it imports ``dagster`` or the
Dagster layer above it, directly, inside a function, or through what it imports.

Parsed by ``tests/layering.py``, as ``tests/stage_d/test_layering.py`` is, then imported in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys

from tests.layering import PACKAGE, imported_modules, offending_imports

DISPATCH = PACKAGE / "dispatch"
ABOVE = ("dagster", "dagster_", "stage_e_dagster.defs", "stage_e_dagster.cli", "stage_e_dagster.definitions")


def names_above(module: str) -> bool:
    return any(module == name or module.startswith(name if name.endswith("_") else name + ".") for name in ABOVE)


def test_the_check_catches_dagster_and_the_dagster_layer() -> None:
    at = DISPATCH / "slots.py"
    for source in ("from dagster import RunRequest\n", "import dagster\n", "from dagster_postgres import x\n",
                   "def f():\n    from ..defs.run_queue import read_run_queue\n", "from ..defs import hold\n"):
        assert any(names_above(m) for m in imported_modules(source, at)), source
    assert not any(names_above(m) for m in imported_modules("from ..catalog.models import MicroBatch\n", at))


def test_no_dispatch_module_imports_dagster_or_the_layer_above() -> None:
    offenders = offending_imports(DISPATCH, names_above)
    assert len(offenders) >= 14  # every module was looked at
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_importing_every_dispatch_module_loads_no_dagster() -> None:
    """What ``dispatch/`` imports, and what its functions import when they run a stage, pull in no Dagster."""
    paths = sorted(DISPATCH.glob("*.py"))
    modules = sorted({f"stage_e_dagster.dispatch.{path.stem}" for path in paths}
                     | {m for path in paths for m in imported_modules(path.read_text(encoding="utf-8"), path)
                        if m.startswith("stage_e_dagster.")})
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        pass  # a name imported from a module, not a module\n"
        "print(sorted(m for m in sys.modules if m == 'dagster' or m.startswith(('dagster.', 'dagster_'))))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded
