"""Child processes in their own process group: start them with default signal handlers, tell
whether any member is left, and signal or wait for the whole group.

``dagster dev``, the daemon and the code server start children of their own (run workers, code
servers, log tailers); stopping only the leader can leave those behind, so everything that starts
Dagster processes (the demo, ``scripts/topology.py``, the benchmarks) stops whole groups.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time


def reset_signals() -> None:
    """A ``preexec_fn``: default SIGINT/SIGTERM handling (a parent that ignores them passes that on;
    ``dagster dev`` in the background then ignores SIGTERM) and a process group of its own."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setpgrp()


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
