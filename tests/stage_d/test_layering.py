"""Stage D reads stored evidence and never imports Stage C (issue 20, item 8).

Parsed, not imported: every ``import`` and ``from ... import`` in every module of ``stage_d/``,
relative or absolute, resolved to the absolute module it names (``tests/layering.py``).
"""

from __future__ import annotations

from tests.layering import PACKAGE, imported_modules, offending_imports

STAGE_C = "stage_e_dagster.stage_c"


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
    offenders = offending_imports(PACKAGE / "stage_d", names_stage_c)
    assert len(offenders) >= 10  # every module was looked at
    assert {path: mods for path, mods in offenders.items() if mods} == {}
