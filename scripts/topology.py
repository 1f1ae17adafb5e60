#!/usr/bin/env python3
"""The production topology on one machine: a gRPC code server, ``dagster-daemon`` and
``dagster-webserver`` as separate processes, on PostgreSQL.

Both the daemon and the webserver load the code location from the code server through a workspace
file, as a deployment with separate services does; the instance is ``deploy/dagster.postgres.yaml``
(PostgreSQL storage, queued run coordinator, run monitoring). Each service runs in its own process
group with its log and pid file in the state folder, so it can be restarted alone and everything
this started can be stopped.

    export DAGSTER_PG_URL=postgresql+psycopg2://postgres@127.0.0.1:5432/dagster
    export STAGE_E_DATABASE_URL=postgresql+psycopg2://postgres@127.0.0.1:5432/catalogue
    scripts/topology.py up --dir /tmp/stage-e-topology        # start all three, wait until each answers
    scripts/topology.py status --dir /tmp/stage-e-topology
    scripts/topology.py restart code-server --dir /tmp/stage-e-topology
    scripts/topology.py down --dir /tmp/stage-e-topology      # stop everything it started

The daemon and the code server get the caller's environment (``STAGE_E_*`` included): the run
workers are launched by the code server, so they run with its environment. Neither database URL is
written to the state folder or printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from stage_e_dagster.code_server import code_server_answers, code_server_command, grpc_workspace, port_taken
from stage_e_dagster.process_groups import group_alive, start_group, stop_pgid

PROJECT_ROOT = Path(__file__).resolve().parents[1]
POSTGRES_INSTANCE_YAML = PROJECT_ROOT / "deploy" / "dagster.postgres.yaml"
BIN = Path(sys.executable).parent
SERVICES = ("code-server", "daemon", "webserver")


class TopologyError(Exception):
    """A service would not start or stop; the message says which and where its log is."""


@dataclass(frozen=True)
class Topology:
    """The state folder of one topology: DAGSTER_HOME, the workspace file, logs and pid files."""

    root: Path
    grpc_port: int = 4266
    web_port: int = 3070

    @property
    def home(self) -> Path:
        return self.root / "dagster_home"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace.yaml"

    def log(self, service: str) -> Path:
        return self.root / f"{service}.log"

    def pid_file(self, service: str) -> Path:
        return self.root / f"{service}.pid"

    def env(self) -> dict[str, str]:
        missing = [name for name in ("DAGSTER_PG_URL", "STAGE_E_DATABASE_URL") if not os.environ.get(name)]
        if missing:
            raise TopologyError(f"set {' and '.join(missing)} (postgresql+psycopg2:// URLs) first")
        from stage_e_dagster.defs.dagster_internals import daemon_environment  # `status` and `down` need no Dagster

        return daemon_environment({**os.environ, "DAGSTER_HOME": str(self.home)})

    def command(self, service: str) -> list[str]:
        if service == "code-server":
            return code_server_command(self.grpc_port)
        if service == "daemon":
            return [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)]
        return [str(BIN / "dagster-webserver"), "-w", str(self.workspace), "-h", "127.0.0.1",
                "-p", str(self.web_port)]

    def prepare(self) -> None:
        """DAGSTER_HOME, its instance storage and the workspace file, before any service starts: services
        started on storage that is not there yet each create it, and can stamp its revision twice."""
        from stage_e_dagster.defs.instance import create_instance_storage  # `status` and `down` need no Dagster

        self.home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(POSTGRES_INSTANCE_YAML, self.home / "dagster.yaml")
        create_instance_storage(self.home)
        self.workspace.write_text(grpc_workspace(self.grpc_port))

    def pid(self, service: str) -> int | None:
        try:
            pid = int(self.pid_file(service).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if group_alive(pid) else None

    def start(self, service: str, env: dict[str, str]) -> int:
        if self.pid(service) is not None:
            raise TopologyError(f"{service} is already running (pid {self.pid(service)})")
        with open(self.log(service), "ab") as log:
            process = start_group(self.command(service), env=env, cwd=self.root, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid_file(service).write_text(str(process.pid))
        return process.pid

    def wait_ready(self, service: str, timeout_s: float) -> None:
        """Until the service answers: the gRPC port, the webserver's /server_info, the daemon's heartbeat."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid(service) is None:
                raise TopologyError(f"{service} exited; see {self.log(service)}:\n{_tail(self.log(service))}")
            if self._answers(service):
                return
            time.sleep(0.5)
        raise TopologyError(f"{service} did not answer within {timeout_s:.0f} s; see {self.log(service)}")

    def _answers(self, service: str) -> bool:
        if service == "code-server":
            return code_server_answers(self.grpc_port)
        if service == "webserver":
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/server_info", timeout=5) as reply:
                    return reply.status == 200
            except OSError:
                return False
        return _daemon_heartbeat(self)

    def stop(self, service: str, timeout_s: float = 30.0) -> bool:
        """SIGTERM to the service's process group, SIGKILL after ``timeout_s``; True if it was running."""
        pid = self.pid(service)
        if pid is None:
            self.pid_file(service).unlink(missing_ok=True)
            return False
        stop_pgid(pid, timeout_s)
        self.pid_file(service).unlink(missing_ok=True)
        return True

    def stop_server_only(self, service: str, timeout_s: float = 30.0) -> None:
        """SIGTERM to the service's own process, leaving the run workers it launched to finish."""
        pid = self.pid(service)
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def up(topology: Topology, timeout_s: float) -> None:
    env = topology.env()
    topology.prepare()
    for port in (topology.grpc_port, topology.web_port):
        if port_taken(port):
            raise TopologyError(f"port {port} on 127.0.0.1 is in use; pick others with --grpc-port/--web-port")
    started: list[str] = []
    try:
        for service in SERVICES:
            topology.start(service, env)
            started.append(service)
            topology.wait_ready(service, timeout_s)
    except BaseException:
        for service in reversed(started):
            topology.stop(service)
        raise


def restart_code_server(topology: Topology, timeout_s: float) -> None:
    """A new code server on the same port. Run workers the old one launched keep going: they talk to
    the instance and the catalogue, not to the server that started them."""
    env = topology.env()
    topology.stop_server_only("code-server")
    topology.pid_file("code-server").unlink(missing_ok=True)
    deadline = time.monotonic() + timeout_s
    while port_taken(topology.grpc_port) and time.monotonic() < deadline:
        time.sleep(0.2)
    topology.start("code-server", env)
    topology.wait_ready("code-server", timeout_s)


def down(topology: Topology) -> list[str]:
    return [service for service in reversed(SERVICES) if topology.stop(service)]


def status(topology: Topology) -> dict[str, int | None]:
    return {service: topology.pid(service) for service in SERVICES}


def _daemon_heartbeat(topology: Topology) -> bool:
    from dagster import DagsterInstance  # imported here: `status` and `down` need no Dagster import

    from stage_e_dagster.defs.dagster_internals import daemon_heartbeats

    os.environ["DAGSTER_HOME"] = str(topology.home)
    with DagsterInstance.get() as instance:
        return bool(daemon_heartbeats(instance))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False



def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status", "restart"))
    parser.add_argument("service", nargs="?", choices=("code-server",), help="for restart: the service")
    parser.add_argument("--dir", type=Path, required=True, help="state folder: DAGSTER_HOME, workspace, logs")
    parser.add_argument("--grpc-port", type=int, default=4266)
    parser.add_argument("--web-port", type=int, default=3070)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for a service to answer")
    args = parser.parse_args(argv)
    topology = Topology(args.dir.resolve(), args.grpc_port, args.web_port)
    try:
        if args.action == "up":
            up(topology, args.timeout)
            print(f"up: code server 127.0.0.1:{topology.grpc_port}, webserver http://127.0.0.1:{topology.web_port}, "
                  f"daemon; logs in {topology.root}")
        elif args.action == "restart":
            if args.service != "code-server":
                parser.error("restart takes the service to restart: code-server")
            restart_code_server(topology, args.timeout)
            print(f"restarted code-server (pid {topology.pid('code-server')})")
        elif args.action == "down":
            stopped = down(topology)
            print("stopped " + (", ".join(stopped) if stopped else "nothing (no service was running)"))
        else:
            print(json.dumps(status(topology), indent=2))
    except TopologyError as exc:
        print(f"topology: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
