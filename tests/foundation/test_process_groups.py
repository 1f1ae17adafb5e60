"""``start_group``: a child in a process group of its own, with default stop signals, that never aborts
when gRPC already runs in the parent (issue 40 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

# A parent with gRPC running (a server and a client health-checking it, as the streaming bench does
# before it starts the daemon) starting a child after each check. Started with a ``preexec_fn``,
# 16 of 300 such children aborted here before ``exec`` with gRPC's "epoll_wait error: Bad file
# descriptor"; the child's exit codes are printed as JSON.
BESIDE_GRPC = textwrap.dedent("""
    import collections, json, subprocess, sys
    from concurrent import futures
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from stage_e_dagster.process_groups import start_group

    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    codes = collections.Counter()
    for _ in range(int(sys.argv[1])):
        stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=60)
        child = start_group(["true"], stderr=subprocess.STDOUT, stdout=subprocess.PIPE)
        out, _ = child.communicate()
        codes[child.returncode] += 1
        if out:
            print(out.decode(errors="replace"), file=sys.stderr)
    print(json.dumps(codes))
""")

# The child reports its stop signals' handlers and whether it leads its own group.
REPORT = ("import os, signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
          "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, os.getpgrp() == os.getpid())")
FROM_A_PARENT = textwrap.dedent("""
    import signal, subprocess, sys
    from stage_e_dagster.process_groups import start_group

    if sys.argv[1] == "ignoring":  # a background job of a non-interactive shell ignores SIGINT
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = start_group([sys.executable, "-c", sys.argv[2]], stdout=subprocess.PIPE)
    print(child.communicate()[0].decode().strip())
    try:
        start_group(["no-such-command-anywhere"])
    except FileNotFoundError:
        print("missing command refused")
""")


def python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=PROJECT,
                          timeout=600)


def test_children_started_beside_a_running_grpc_never_abort() -> None:
    done = python(BESIDE_GRPC, "500")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"0": 500}, done.stderr[-3000:]


@pytest.mark.parametrize("parent", ["handling", "ignoring"])
def test_a_child_leads_its_own_group_with_default_stop_signals(parent: str) -> None:
    done = python(FROM_A_PARENT, parent, REPORT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True True True", "missing command refused"], done.stdout + done.stderr


def test_nothing_in_the_project_starts_a_child_with_a_preexec_fn() -> None:
    needle = "preexec" + "_fn="  # split, so this file does not find itself
    found = [str(path.relative_to(PROJECT)) for folder in ("stage_e_dagster", "bench", "scripts", "tests")
             for path in (PROJECT / folder).rglob("*.py") if needle in path.read_text(errors="replace")]
    assert found == [], f"use process_groups.start_group instead: {found}"
