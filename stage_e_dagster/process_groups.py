"""Child processes in their own process group: start them with default signal handlers, tell
whether any member is left, and signal or wait for the whole group.

``dagster dev``, the daemon and the code server start children of their own (run workers, code
servers, log tailers); stopping only the leader can leave those behind, so everything that starts
Dagster processes (the demo, ``scripts/topology.py``, the benchmarks) stops whole groups.

Never start them with a ``preexec_fn``: it makes CPython ``fork()`` (not ``vfork()``), which runs
gRPC's fork handlers in the child; where gRPC already runs in the parent (a health check asked in
process, a Dagster client) they restart its poller there, CPython then closes the inherited
descriptors under it, and its next ``epoll_wait`` aborts the child (SIGABRT, "epoll_wait error: Bad
file descriptor") before the command even starts. :func:`start_group` asks for the group through
``process_group=0`` instead, which keeps the ``vfork()`` path and runs no Python in the child.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Sequence

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# Run by this interpreter in the child when the parent ignores a stop signal: back to the default
# disposition, then the command itself (same process, same group). ``-S``: no site import, ~10 ms.
_EXEC_WITH_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for signum in (signal.SIGINT, signal.SIGTERM):\n"
    "    signal.signal(signum, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[2:])\n"
)


def start_group(command: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(command, **popen)`` as the leader of a process group of its own, with default
    SIGINT/SIGTERM handling.

    A signal the parent handles is back to its default after ``exec`` anyway; one the parent ignores
    (a background job of a non-interactive shell ignores SIGINT, and ``dagster dev`` started from it
    then cannot be stopped) stays ignored, so then the command starts through a two-line exec shim.
    """
    command = [os.fspath(part) for part in command]
    if any(signal.getsignal(signum) in (signal.SIG_IGN, None) for signum in STOP_SIGNALS):
        search = os.pathsep.join(os.get_exec_path(popen.get("env")))
        executable = shutil.which(command[0], path=search)
        if executable is None:  # as Popen would: in the parent, before anything starts
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", command[0])
        command = [sys.executable, "-S", "-c", _EXEC_WITH_DEFAULT_SIGNALS, executable, *command]
    return subprocess.Popen(command, process_group=0, **popen)


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # the whole group has already exited
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Until no member of the group is left, at most ``timeout_s``; True when it is gone."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def stop_pgid(pgid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM a group this process did not start (nothing of it to reap), SIGKILL whatever is left
    after ``timeout_s``, and wait until it is empty."""
    signal_group(pgid, signal.SIGTERM)
    kill_what_is_left(pgid, timeout_s, after_kill_s=math.inf)


def stop_group(leader: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM a child's whole group, reap the child, and wait for every other member (a daemon's
    code server, a run worker still writing); SIGKILL whatever is left after ``timeout_s``. The
    child is reaped first: until then it stays in the group as a zombie."""
    signal_group(leader.pid, signal.SIGTERM)
    try:
        leader.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        signal_group(leader.pid, signal.SIGKILL)
        leader.wait()
    kill_what_is_left(leader.pid, timeout_s, after_kill_s=timeout_s)


def kill_what_is_left(pgid: int, timeout_s: float, *, after_kill_s: float) -> None:
    """Wait up to ``timeout_s`` for the group to empty; SIGKILL what is left and wait ``after_kill_s``."""
    if not wait_group_gone(pgid, timeout_s):
        signal_group(pgid, signal.SIGKILL)
        wait_group_gone(pgid, after_kill_s)
