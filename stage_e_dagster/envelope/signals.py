"""Sampling the envelope's signals from this host, this process and the shared fetch window."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from sqlalchemy.orm import Session

from ..settings import usable_cpus
from .bars import Ceilings, EnvelopeSignals
from .failures import extractor_error_counts, failed_batch_streak
from .fetch_window import window_counts

# The two ways contention is read: the kernel's pressure stall information, or (without it) the load
# average beyond this instance's own running dispatch runs.
CPU_PRESSURE = "cpu_pressure"
EXCESS_LOAD = "excess_load"


class PressureSource(Protocol):
    def read(self) -> float | None: ...


@dataclass(frozen=True)
class CpuPressure:
    """A PSI file's ``some avg10``: the percent of the last 10 s in which a runnable task waited for a CPU.

    Our own workers, one per CPU, keep it near 0; it rises only when runnable work outnumbers the
    CPUs, which is what the governor steers by. ``None`` (no file, no such line) means no PSI here."""

    path: Path | None

    def read(self) -> float | None:
        if self.path is None:
            return None
        try:
            text = self.path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            return None
        for line in text.splitlines():
            if line.startswith("some "):
                fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
                try:
                    return float(fields["avg10"])
                except (KeyError, ValueError):
                    return None
        return None


@dataclass(frozen=True)
class Contention:
    """One contention reading: which signal, and its value (percent for PSI, CPUs of load otherwise)."""

    signal: str
    value: float


def read_contention(pressure: PressureSource, *, own_running: int) -> Contention | None:
    """CPU pressure where the kernel reports it; else the load average less the ``own_running`` dispatch
    runs (each keeps about one CPU busy), so our own workers on cores nobody else wants read as none."""
    some = pressure.read()
    if some is not None:
        return Contention(CPU_PRESSURE, some)
    load = host_load()
    if load is None:
        return None
    return Contention(EXCESS_LOAD, max(0.0, load - own_running))


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
    """A fresh sample for the bars that trip on one reading: the shared fetch window, the failures that
    must not hide (batches failed in a row, extractor errors) and the RSS the caller measured (if any).
    Host load is not among them: the governor steers it (``governor``)."""
    counts = window_counts(session, ceilings.fetch_failure_window)
    return replace(
        failure_signals(session, ceilings),
        host_load=None,
        rss_mb=rss_mb,
        fetch_failures=counts.failures,
        fetch_total=counts.total,
        lockout_seen=False,
    )


def failure_signals(session: Session, ceilings: Ceilings) -> EnvelopeSignals:
    """Only the failures that must not hide: the batches failed in a row for one cause, and the cards
    read whose extractor raised (``envelope.failures``)."""
    streak = failed_batch_streak(session, longest=ceilings.failed_batches + 1)
    errors = extractor_error_counts(session, ceilings.extractor_error_window)
    return EnvelopeSignals(
        failed_batches=streak.length,
        failure_cause=streak.reason,
        extractor_errors=errors.errors,
        extractor_read=errors.read,
        extractor_error_cause=errors.cause,
    )
