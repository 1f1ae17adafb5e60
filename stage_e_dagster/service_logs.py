"""What the logs of the Dagster services (``dg dev``, the daemon, the webserver, a code server) must not
hold after a start and a stop: one reading shared by ``scripts/service_cycles.py`` and the tests that
start those services, so the script and the tests cannot drift apart on what counts as clean.

It lives in the package (it imports nothing else of it) because tests import the package, never a
script.
"""

from __future__ import annotations

# An abort on its way: gRPC's poller losing its descriptor (issue 40 part 6), a fatal error, a core dump.
ABORT_LINES = ("epoll_wait error", "Fatal", "Check failed", "core dumped")
# ``dg dev`` reports a service that died, or one it had to kill at its stop.
BAD_LOG_LINES = (*ABORT_LINES, "Traceback", "shut down unexpectedly", "did not terminate cleanly")
# What the daemon logs once it has joined its daemons' threads, just before it closes its workspace.
DAEMON_THREADS_DOWN = "Daemon threads shut down."
# What a thread of the daemon raises when it asks the closed workspace for the code location.
# Dagster 1.13.27 closes the workspace before it shuts its daemons' thread pools down
# (``dagster/_daemon/controller.py``, ``daemon_controller_from_instance``: the daemons enter its ExitStack
# before the ``WorkspaceProcessContext``, so they leave it after), and whatever those pools still run
# then finds no location. The project's sensors no longer tick in a pool (``sensors: use_threads: false``
# in every instance file), but the run queue's dequeue pool and the backfill daemon's pool still can.
LOCATION_GONE = "DagsterCodeLocationNotFoundError: Location stage_e_dagster does not exist in workspace"


def bad_lines(text: str) -> list[tuple[str, str]]:
    """(kind, line) for each bad line of a log; a traceback counts once, by the exception it ends in.

    Kinds: ``[abort]``, ``[dagster-race]`` (``LOCATION_GONE`` after the daemon joined its threads: named
    apart so that it is neither hidden nor confused with a fault of ours) and ``[log]`` for the rest.
    """
    lines = text.splitlines()
    shut_down_at = next((i for i, line in enumerate(lines) if DAEMON_THREADS_DOWN in line), len(lines))
    found = []
    for i, line in enumerate(lines):
        if not any(bad in line for bad in BAD_LOG_LINES):
            continue
        if "Traceback" in line:
            # The exception line: the first one after the traceback's indented frames.
            line = next((after for after in lines[i + 1:] if after and not after[0].isspace()), line)
            race = i > shut_down_at and LOCATION_GONE in line
            found.append(("[dagster-race]" if race else "[log]", line.strip()[:200]))
        else:
            kind = "[abort]" if any(bad in line for bad in ABORT_LINES) else "[log]"
            found.append((kind, line.strip()[:200]))
    return found
