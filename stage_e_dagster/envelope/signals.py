"""Sampling the envelope's signals from this host, this process and the shared fetch window."""

from __future__ import annotations

import os

from sqlalchemy.orm import Session

from ..settings import usable_cpus
from .bars import Ceilings, EnvelopeSignals
from .fetch_window import window_counts


def host_load() -> float | None:
    """The 1-minute load average as this process sees it, or ``None`` where the platform has none.

    Where a cgroup quota or CPU affinity gives the process fewer CPUs than the host has, the host's
    load is scaled to that share, so it compares with a ceiling in this process's CPUs."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    host_cpus = float(os.cpu_count() or 1)
    return load * min(1.0, usable_cpus() / host_cpus)


def _proc_status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_rss_mb() -> float | None:
    """This process's resident set now (it can fall again, unlike the peak)."""
    return _proc_status_mb("VmRSS")


def peak_rss_mb() -> float | None:
    """This process's true peak resident set over its life (the kernel's high-water mark)."""
    peak = _proc_status_mb("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except (ImportError, OSError):
        return None


def sample_signals(session: Session, ceilings: Ceilings, *, rss_mb: float | None = None) -> EnvelopeSignals:
    """A fresh sample for the bars that trip on one reading: the shared fetch window and the RSS the
    caller measured (if any). Host load is not among them: the governor steers it (``governor``)."""
    counts = window_counts(session, ceilings.fetch_failure_window)
    return EnvelopeSignals(
        host_load=None,
        rss_mb=rss_mb,
        fetch_failures=counts.failures,
        fetch_total=counts.total,
        lockout_seen=False,
    )
