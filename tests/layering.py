"""The layering checks' shared reader: what a module's source imports, parsed, not imported.

Every ``import`` and ``from ... import`` in a module, relative or absolute, inside a function or not,
resolved to the absolute module it names; used by ``tests/stage_d/test_layering.py`` and
``tests/dispatch/test_layering.py``, which differ only in the names their layer must not import.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

import stage_e_dagster

PACKAGE = Path(stage_e_dagster.__file__).resolve().parent


def imported_modules(source: str, path: Path) -> set[str]:
    """Absolute names ``source`` (the text of the module at ``path``) imports, relative ones resolved."""
    package = ["stage_e_dagster", *path.relative_to(PACKAGE).parent.parts]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def offending_imports(folder: Path, offends: Callable[[str], bool]) -> dict[str, list[str]]:
    """Every module under ``folder`` (by its path in the package) with the names it imports that
    ``offends``; a clean module maps to ``[]``, so a caller can also count the modules looked at."""
    return {
        str(path.relative_to(PACKAGE)): sorted(m for m in imported_modules(path.read_text(encoding="utf-8"), path)
                                               if offends(m))
        for path in sorted(folder.rglob("*.py"))
    }
