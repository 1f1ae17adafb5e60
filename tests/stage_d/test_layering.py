"""Stage D reads stored evidence and never imports Stage C (issue 20, item 8).

Parsed, not imported: every ``import`` and ``from ... import`` in every module of ``stage_d/``,
relative or absolute, resolved to the absolute module it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stage_e_dagster

PACKAGE = Path(stage_e_dagster.__file__).resolve().parent
STAGE_C = "stage_e_dagster.stage_c"


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


def names_stage_c(module: str) -> bool:
    return module == STAGE_C or module.startswith(STAGE_C + ".")


def test_the_resolver_catches_every_form_of_a_stage_c_import() -> None:
    """The check below can fail: each way a Stage D module could name Stage C resolves to it."""
    at = PACKAGE / "stage_d" / "fallback.py"
    for source in ("from ..stage_c.hashing import hamming\n", "from .. import stage_c\n",
                   "import stage_e_dagster.stage_c.parse\n", "from stage_e_dagster.stage_c import current\n"):
        assert any(names_stage_c(m) for m in imported_modules(source, at)), source
    assert not any(names_stage_c(m) for m in imported_modules("from ..catalog.evidence_facts import hamming\n", at))


def test_no_stage_d_module_imports_stage_c() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imported_modules(path.read_text(encoding="utf-8"), path)
                                               if names_stage_c(m))
        for path in sorted((PACKAGE / "stage_d").rglob("*.py"))
    }
    assert len(offenders) >= 10  # every module was looked at
    assert {path: mods for path, mods in offenders.items() if mods} == {}
