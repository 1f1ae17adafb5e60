"""``scripts/screenshots.py`` end to end: the demo in a real headless chromium, five pictures written, the
check's ack link followed to a launchpad whose editor holds the trip id, and nothing left running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from PIL import Image

PROJECT = Path(__file__).resolve().parents[2]
SCRIPT = PROJECT / "scripts" / "screenshots.py"
NAMES = ("envelope-plots.png", "check-red-during-a-trip.png", "ack-launchpad.png", "run-page.png",
         "stage-c-ledger-plots.png")


def _demo_processes(state: str) -> list[str]:
    """Command lines of the processes started with this state folder (the demo and all it started)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            environ = proc.info["environ"] or {}
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if environ.get("STAGE_E_STATE_DIR") == state:
            found.append(" ".join(proc.info["cmdline"] or []))
    return found


@pytest.mark.slow
def test_the_script_writes_five_screenshots_and_follows_the_ack_link_into_the_launchpad(tmp_path: Path) -> None:
    out = tmp_path / "images"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=1500, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in NAMES:
        picture = out / name
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert picture.stat().st_size > 20_000, (name, picture.stat().st_size)  # a page, not a blank
        with Image.open(picture) as image:
            assert image.size == (1440, 900), (name, image.size)
            assert len(image.convert("L").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 16, name
    assert "the launchpad's editor holds trip envtrip-" in done.stdout, done.stdout
    state = done.stdout.split("state folder ", 1)[1].split()[0]
    assert _demo_processes(state) == []
    assert not Path(state).exists()  # removed after a run that succeeded
