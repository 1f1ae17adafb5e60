"""A fresh state folder starts cleanly: the webserver, the daemon and a code server started at once on
an empty SQLite ``DAGSTER_HOME`` never initialise Dagster's storage twice.

Each of the three creates the storage it finds missing; two of them can both stamp the schedule
storage's Alembic revision, and every later process then fails its revision check ("more than one
head"). The harness, like every entry point of the project, creates the storage first.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML, PROJECT_ROOT, create_instance_storage
from stage_e_dagster.process_groups import start_group, stop_group
from stage_e_dagster.service_logs import bad_lines

from .conftest import free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
LOCATION = "stage_e_dagster"
STARTS = 3
# The line each process logs once it has opened the instance and, for the two clients, reached the code server.
READY = {
    "code-server": "Started Dagster code proxy server",
    "webserver": "Serving dagster-webserver on",
    "daemon": "Checking for new runs for sensor",
}


class Services:
    """The three processes of a deployment on one home: a gRPC code server, and the webserver and the
    daemon loading the code location from it. Started at once, as ``dg dev`` and a cluster do."""

    def __init__(self, root: Path, catalog_url: str) -> None:
        self.root = root
        self.home = root / "dagster_home"
        self.home.mkdir(parents=True)
        shutil.copyfile(EMBEDDED_INSTANCE_YAML, self.home / "dagster.yaml")
        port = free_port()
        self.workspace = root / "workspace.yaml"
        self.workspace.write_text(
            "load_from:\n  - grpc_server:\n      host: 127.0.0.1\n"
            f"      port: {port}\n      location_name: {LOCATION}\n"
        )
        self.commands = {
            "code-server": [str(BIN / "dagster"), "code-server", "start", "-h", "127.0.0.1", "-p", str(port),
                            "-m", "stage_e_dagster.definitions", "--location-name", LOCATION],
            "webserver": [str(BIN / "dagster-webserver"), "-w", str(self.workspace), "-h", "127.0.0.1",
                          "-p", str(free_port())],
            "daemon": [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)],
        }
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))} | {
            "DAGSTER_HOME": str(self.home),
            "STAGE_E_STATE_DIR": str(root / "state"),
            "STAGE_E_DATABASE_URL": catalog_url,
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def start(self) -> None:
        create_instance_storage(self.home)
        for name, command in self.commands.items():
            with open(self.log(name), "ab") as log:
                self.processes[name] = start_group(
                    command, env=self.env, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT,
                )

    def settled(self) -> bool:
        """Every process ready, or one of them exited or logged a bad line (no point waiting on)."""
        logs = {name: self.log(name).read_text(errors="replace") for name in self.commands}
        if any(bad_lines(text) for text in logs.values()):
            return True
        if any(process.poll() is not None for process in self.processes.values()):
            return True
        return all(READY[name] in logs[name] for name in self.commands)

    def stop(self) -> None:
        """The daemon and the webserver first, then the code server they call: stopped first, the server
        left a daemon mid-tick with a refused gRPC call and a traceback in its log (seen once in CI)."""
        for process in reversed(list(self.processes.values())):
            stop_group(process)


def alembic_rows(home: Path) -> dict[str, int]:
    """Rows of ``alembic_version`` in every SQLite file of the home: one each when storage was created once."""
    rows = {}
    for path in sorted(home.rglob("*.db")):
        with sqlite3.connect(path) as db:
            rows[str(path.relative_to(home))] = db.execute("SELECT count(*) FROM alembic_version").fetchone()[0]
    return rows


def test_webserver_daemon_and_code_server_started_at_once_on_an_empty_home_initialise_storage_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    for start in range(STARTS):
        services = Services(tmp_path / f"start-{start}", sqlite_url)
        services.start()
        try:
            deadline = time.monotonic() + 240
            while not services.settled() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            services.stop()
        logs = {name: services.log(name).read_text(errors="replace") for name in services.commands}
        rows = alembic_rows(services.home)
        assert rows and set(rows.values()) == {1}, f"start {start}: storage initialised twice: {rows}"
        for name, text in logs.items():
            # No tolerance for Dagster's missing-location race (service_logs.LOCATION_GONE): the workspace
            # is empty only before the daemon's threads start and after it closes it at the stop, and here
            # nothing runs in a pool then (sensors tick in the daemon's thread; no run, no backfill).
            assert not bad_lines(text) and "alembic" not in text.lower(), f"start {start}, {name}:\n{text[-3000:]}"
            assert READY[name] in text, f"start {start}: {name} never got ready:\n{text[-3000:]}"
