"""Loading the code location imports only what it needs to list its definitions (issue 18, item 3).

A run worker loads ``stage_e_dagster.definitions`` before its first step; OpenCV, ONNX Runtime, the HTTP
client (which pulls in Rich), the CLI, the Scryfall importer and the corpus renderer are for the
steps or for other commands, so they load when those first need them. Each check runs in a fresh
interpreter, where ``sys.modules`` holds exactly what the import brought in.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a child interpreter per check

NOT_AT_LOAD = (
    "cv2",
    "onnxruntime",
    "rapidocr",
    "httpx",
    "rich",
    "typer",
    "stage_e_dagster.cli",
    "stage_e_dagster.catalog_import",
    "stage_e_dagster.corpus",
    "stage_e_dagster.stage_c.run",
    "stage_e_dagster.stage_d.run",
)

PROBE = """
import json, sys
{imports}
names = json.loads(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in names))))
"""


def loaded_after(imports: str) -> list[str]:
    """The modules of ``NOT_AT_LOAD`` that ``imports`` brought in, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports), json.dumps(NOT_AT_LOAD)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_the_code_location_imports_neither_opencv_nor_onnxruntime_nor_the_cli() -> None:
    loaded = loaded_after(
        "from stage_e_dagster.definitions import defs\n"
        "repo = defs.get_repository_def()\n"
        "assert repo.get_job('stage_e_dispatch') is not None and repo.sensor_defs"
    )
    assert loaded == []


def test_the_probe_sees_a_stage_that_does_import_them() -> None:
    """The same probe after importing Stage C's entry point: the check above can fail."""
    loaded = loaded_after("import stage_e_dagster.stage_c.run")
    assert "cv2" in loaded and "stage_e_dagster.stage_c.run" in loaded


LOCAL_FETCH = """
import pathlib, tempfile
from stage_e_dagster.stage_c.fetch import ImageFetcher
root = pathlib.Path(tempfile.mkdtemp())
(root / "card.png").write_bytes(b"not really a png")
fetcher = ImageFetcher(engine=None, image_roots=[root], allowed_hosts=["127.0.0.1"], timeout_s=1.0,
                       max_bytes=1000, rate_per_sec=10.0)
assert fetcher.fetch((root / "card.png").as_uri()).outcome == "ok"
{then}
fetcher.close()
"""


def test_a_run_over_local_uploads_never_loads_the_http_client() -> None:
    """httpx (and the Rich it pulls in) costs a run 0.2 s before its first card; only a URL needs it."""
    assert "httpx" not in loaded_after(LOCAL_FETCH.format(then=""))
    # The same probe with one URL fetched (nothing listens on port 9; the refusal is the answer).
    assert "httpx" in loaded_after(LOCAL_FETCH.format(then="fetcher.fetch('http://127.0.0.1:9/card.png')"))
