"""The code location served by a gRPC code server of its own, as production runs it.

``dagster-daemon run`` on a ``python_module`` workspace starts its own code server and replaces it
every 60 s (Dagster's ``RELOAD_WORKSPACE_INTERVAL``): a new process importing Dagster, OpenCV and
the project each minute, about 3 s of CPU beside the runs. A daemon (or webserver) that loads the
location through a ``grpc_server`` entry only re-reads its definitions from the one server, as
``dg dev`` and the deployment in docs/operations.md do. ``scripts/topology.py`` and the streaming
benchmark start the server with these.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

LOCATION = "stage_e_dagster"
MODULE = "stage_e_dagster.definitions"
HOST = "127.0.0.1"
HEALTH_SERVICE = "DagsterApi"  # the service name Dagster's gRPC server reports its health under
BIN = Path(sys.executable).parent


def code_server_command(port: int, host: str = HOST) -> list[str]:
    """``dagster code-server start`` serving the definitions on ``host:port`` (the Dockerfile's command)."""
    return [str(BIN / "dagster"), "code-server", "start", "-h", host, "-p", str(port), "-m", MODULE,
            "--location-name", LOCATION]


def grpc_server_command(port: int, host: str = HOST) -> list[str]:
    """``dagster api grpc`` serving the definitions on ``host:port``: the one process the Helm chart's
    user-code deployment runs, without ``code-server start``'s proxy in front (a second gRPC process,
    which a deployment restarts instead of reloading)."""
    return [str(BIN / "dagster"), "api", "grpc", "-h", host, "-p", str(port), "-m", MODULE, "--location-name", LOCATION]


def grpc_workspace(port: int, host: str = HOST) -> str:
    """A workspace file's text that loads the location from the code server on ``host:port``."""
    return (
        "# The code location is the code server on this port, not a module loaded in process.\n"
        "load_from:\n"
        "  - grpc_server:\n"
        f"      host: {host}\n"
        f"      port: {port}\n"
        f"      location_name: {LOCATION}\n"
    )


def code_server_answers(port: int, host: str = HOST, timeout_s: float = 5.0) -> bool:
    """Whether a code server on ``host:port`` answers the gRPC health check that ``dagster api
    grpc-health-check`` asks (service ``DagsterApi``), asked in process: the command is a new Python
    importing Dagster, about 1.5 s of CPU a probe beside the server starting up."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return answer.status == health_pb2.HealthCheckResponse.SERVING


def port_taken(port: int, host: str = HOST) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) == 0


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the system's pick), for a server started right after."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
