"""``scripts/service_cycles.py``, short: the UI demo, the headless daemon, then the UI demo stopped with a
dispatch run going, each started and stopped as a user does (issue 40 item 6; the script runs 50 cycles
by default): no abort, no process left, no traceback of ours in their logs.

One kind of traceback is let through, by name: ``[dagster-race]``, Dagster 1.13.27's daemon closing its
workspace before its sensor threads finish (the script's docstring says where), which a stop can hit
in any cycle. The script still counts it and exits 1 on it; every other problem fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from stage_e_dagster.defs.instance import PROJECT_ROOT

pytestmark = pytest.mark.slow

SCRIPT = PROJECT_ROOT / "scripts" / "service_cycles.py"


def test_the_services_start_and_stop_three_times_without_an_abort_or_a_process_left(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "3", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=1800)
    cycles = [line for line in done.stdout.splitlines() if line.startswith("cycle ")]
    assert len(cycles) == 3, done.stdout[-4000:] + done.stderr[-4000:]
    assert re.search(r"^cycle +1/3 ui +SIGINT ", done.stdout, re.M), done.stdout
    assert re.search(r"^cycle +2/3 headless +SIGINT ", done.stdout, re.M), done.stdout
    assert re.search(r"^cycle +3/3 ui +SIGTERM +runs going at the stop [1-9]", done.stdout, re.M), done.stdout
    kinds = {kind for line in cycles for kind in re.findall(r"\[([a-z-]+)\] ", line)}
    assert kinds <= {"dagster-race"}, done.stdout
    assert all(" exit 0 " in line for line in cycles), done.stdout
    assert done.returncode == (1 if kinds else 0), done.stdout + done.stderr[-4000:]
    assert re.search(r"^3 cycles in .* \(UI demo 2, headless daemon 1; stopped with a run going [1-9]", done.stdout,
                     re.M), done.stdout
