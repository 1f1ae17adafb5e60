"""One typed settings object, read from the ``STAGE_E_*`` environment variables.

Only this module and ``defs/resources.py`` read the environment; every lower layer takes
its values as arguments. A bad value fails at start with one line naming the variable.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def usable_cpus() -> float:
    """CPUs this process may use: its CPU affinity, capped by a cgroup v2 quota (``cpu.max``) where set.

    In a container the host's CPU count says nothing about what the pod may use, so the envelope's
    defaults come from this."""
    try:
        count = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        count = float(os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(float(quota) / float(period), 1.0))
    except (OSError, ValueError):
        pass
    return count


def default_dispatch_cap() -> int:
    """One dispatch run per usable CPU (at least one): the contention governor backs off from there."""
    return max(1, int(usable_cpus()))


def default_cpu_pressure_file() -> Path | None:
    """Where the kernel says whether this process's runnable tasks wait for a CPU (PSI), or ``None``.

    Inside a container (a cgroup v2 namespace, so ``/proc/self/cgroup`` reads ``0::/``) that is the
    container's own ``cpu.pressure``; elsewhere the host's ``/proc/pressure/cpu``."""
    own = Path("/sys/fs/cgroup/cpu.pressure")
    try:
        in_namespace = "0::/" in Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        in_namespace = False
    if in_namespace and own.is_file():
        return own
    host = Path("/proc/pressure/cpu")
    return host if host.is_file() else None


# An idle tick's watch must end before the sensor daemon's next pass (every 5 s; the sensors'
# minimum interval is 4 s), or that pass skips the sensor and the next card waits 10 s instead of 5.
MAX_ARRIVAL_WAIT_S = 4.0


class SettingsError(ValueError):
    """A ``STAGE_E_*`` variable holds a value the project cannot use."""


@dataclass(frozen=True)
class Settings:
    streaming_enabled: bool = False
    state_dir: Path = field(default_factory=lambda: Path(".state").resolve())
    database_url: str = ""
    micro_batch_size: int | None = None  # None: batches sized by work (batch_target_s); set: a fixed count
    batch_target_s: float = 60.0
    # How long an idle card_created tick keeps watching for new cards before it returns (at most one
    # daemon pass, 4 s): a card landing meanwhile is batched within a quarter second, not at the next pass.
    arrival_wait_s: float = 3.5
    max_concurrent_dispatches: int = field(default_factory=default_dispatch_cap)
    # CPU contention, where the kernel has PSI: ``some avg10``, the percent of the last 10 s in which a
    # runnable task waited for a CPU. Our own workers, one per CPU, leave it near 0; each busy task
    # beyond the CPUs adds about 100/CPUs. The bars 25/75 follow (on 2 CPUs: our 2 runs beside a
    # 2-process neighbour ~100, halve; our 1 beside it ~50 plus noise, hold), and a quiet 2-core
    # machine read 12-17 % with our two runs and 85-94 % with that neighbour (docs/operations.md).
    cpu_pressure_file: Path | None = field(default_factory=default_cpu_pressure_file)
    cpu_pressure_ceiling: float = 75.0
    cpu_pressure_soft: float | None = None  # None: 1/3 of the hard bar (25)
    # Without PSI: the load average beyond this instance's running dispatch runs, in usable CPUs.
    host_load_ceiling: float = field(default_factory=usable_cpus)
    host_load_soft: float | None = None  # None: 3/4 of the hard bar
    host_load_trip_after_s: float = 120.0
    rss_mb_ceiling: float = 512.0
    fetch_failure_rate_ceiling: float = 0.01
    fetch_failure_window: int = 500
    image_roots: tuple[Path, ...] = ()
    fetch_allowed_hosts: tuple[str, ...] = ()
    fetch_rate_per_sec: float = 7.0
    fetch_timeout_s: float = 15.0
    fetch_max_bytes: int = 25 * 1024 * 1024
    claim_ttl_s: int = 900
    max_batch_attempts: int = 3
    run_max_runtime_s: int = 1800
    retention_days: int = 7
    abandoned_grace_s: int = 60  # how long an abandoned batch keeps its partition before retention may delete it

    @property
    def cpu_pressure_soft_bar(self) -> float:
        """Below it (percent) the governor allows more dispatch concurrency; up to the hard bar it holds."""
        return self.cpu_pressure_soft if self.cpu_pressure_soft is not None else self.cpu_pressure_ceiling / 3

    @property
    def host_load_soft_bar(self) -> float:
        """Below it the governor allows more dispatch concurrency; between it and the hard bar, it holds."""
        return self.host_load_soft if self.host_load_soft is not None else 0.75 * self.host_load_ceiling

    @property
    def dagster_home(self) -> Path:
        return self.state_dir / "dagster_home"


def default_database_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir / 'catalog.sqlite'}"


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r} is not a boolean (use true or false)")


def _parse_number(
    name: str, raw: str, kind: Callable[[str], T], minimum: float | None, maximum: float | None = None
) -> T:
    try:
        value = kind(raw.strip())
    except ValueError:
        word = "a whole number" if kind is int else "a number"
        raise SettingsError(f"{name}={raw!r} is not {word}") from None
    if minimum is not None and value < minimum:  # type: ignore[operator]
        raise SettingsError(f"{name}={raw!r} must be at least {minimum:g}")
    if maximum is not None and value > maximum:  # type: ignore[operator]
        raise SettingsError(f"{name}={raw!r} must be at most {maximum:g}")
    if isinstance(value, float) and value != value:  # NaN
        raise SettingsError(f"{name}={raw!r} is not a number")
    return value


def _split(raw: str, sep: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(sep) if part.strip())


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from ``environ`` (default: the process environment)."""
    env = os.environ if environ is None else environ
    defaults = Settings()

    def get(name: str) -> str | None:
        value = env.get(name)
        return None if value is None or value.strip() == "" else value

    def number(
        name: str, kind: Callable[[str], T], default: T, minimum: float | None, maximum: float | None = None
    ) -> T:
        raw = get(name)
        return default if raw is None else _parse_number(name, raw, kind, minimum, maximum)

    raw_state = get("STAGE_E_STATE_DIR")
    state_dir = Path(raw_state).expanduser().resolve() if raw_state else defaults.state_dir
    raw_enabled = env.get("STAGE_E_STREAMING_ENABLED")
    roots_raw = get("STAGE_E_IMAGE_ROOTS")
    hosts_raw = get("STAGE_E_FETCH_ALLOWED_HOSTS")
    raw_pressure = get("STAGE_E_CPU_PRESSURE_FILE")
    settings = Settings(
        streaming_enabled=(_parse_bool("STAGE_E_STREAMING_ENABLED", raw_enabled) if raw_enabled is not None else False),
        state_dir=state_dir,
        database_url=get("STAGE_E_DATABASE_URL") or default_database_url(state_dir),
        micro_batch_size=number("STAGE_E_MICRO_BATCH_SIZE", int, None, 1),  # type: ignore[arg-type]
        batch_target_s=number("STAGE_E_BATCH_TARGET_S", float, defaults.batch_target_s, 1),
        arrival_wait_s=number("STAGE_E_ARRIVAL_WAIT_S", float, defaults.arrival_wait_s, 0, MAX_ARRIVAL_WAIT_S),
        max_concurrent_dispatches=number(
            "STAGE_E_MAX_CONCURRENT_DISPATCHES", int, defaults.max_concurrent_dispatches, 1
        ),
        cpu_pressure_file=Path(raw_pressure).expanduser() if raw_pressure else defaults.cpu_pressure_file,
        cpu_pressure_ceiling=number(
            "STAGE_E_CPU_PRESSURE_CEILING", float, defaults.cpu_pressure_ceiling, 0, 100
        ),
        cpu_pressure_soft=number("STAGE_E_CPU_PRESSURE_SOFT", float, None, 0, 100),  # type: ignore[arg-type]
        host_load_ceiling=number("STAGE_E_HOST_LOAD_CEILING", float, defaults.host_load_ceiling, 0),
        host_load_soft=number("STAGE_E_HOST_LOAD_SOFT", float, None, 0),  # type: ignore[arg-type]
        host_load_trip_after_s=number(
            "STAGE_E_HOST_LOAD_TRIP_AFTER_S", float, defaults.host_load_trip_after_s, 0
        ),
        rss_mb_ceiling=number("STAGE_E_RSS_MB_CEILING", float, defaults.rss_mb_ceiling, 0),
        fetch_failure_rate_ceiling=number(
            "STAGE_E_FETCH_FAILURE_RATE_CEILING", float, defaults.fetch_failure_rate_ceiling, 0, 1
        ),
        fetch_failure_window=number("STAGE_E_FETCH_FAILURE_WINDOW", int, defaults.fetch_failure_window, 1),
        image_roots=(
            tuple(Path(p).expanduser().resolve() for p in _split(roots_raw, os.pathsep))
            if roots_raw
            else (state_dir / "images",)
        ),
        fetch_allowed_hosts=tuple(h.lower() for h in _split(hosts_raw, ",")) if hosts_raw else (),
        fetch_rate_per_sec=number("STAGE_E_FETCH_RATE_PER_SEC", float, defaults.fetch_rate_per_sec, 0.01),
        fetch_timeout_s=number("STAGE_E_FETCH_TIMEOUT_S", float, defaults.fetch_timeout_s, 0.1),
        fetch_max_bytes=number("STAGE_E_FETCH_MAX_BYTES", int, defaults.fetch_max_bytes, 1024),
        claim_ttl_s=number("STAGE_E_CLAIM_TTL_S", int, defaults.claim_ttl_s, 1),
        max_batch_attempts=number("STAGE_E_MAX_BATCH_ATTEMPTS", int, defaults.max_batch_attempts, 1),
        run_max_runtime_s=number("STAGE_E_RUN_MAX_RUNTIME_S", int, defaults.run_max_runtime_s, 1),
        retention_days=number("STAGE_E_RETENTION_DAYS", int, defaults.retention_days, 1),
        abandoned_grace_s=number("STAGE_E_ABANDONED_GRACE_S", int, defaults.abandoned_grace_s, 1),
    )
    if settings.cpu_pressure_soft_bar > settings.cpu_pressure_ceiling:
        raise SettingsError(
            f"STAGE_E_CPU_PRESSURE_SOFT={settings.cpu_pressure_soft_bar:g} must not be above "
            f"STAGE_E_CPU_PRESSURE_CEILING={settings.cpu_pressure_ceiling:g}"
        )
    if settings.host_load_soft_bar > settings.host_load_ceiling:
        raise SettingsError(
            f"STAGE_E_HOST_LOAD_SOFT={settings.host_load_soft_bar:g} must not be above "
            f"STAGE_E_HOST_LOAD_CEILING={settings.host_load_ceiling:g}"
        )
    return settings


# The settings that say which locators a fetch may read; they live here, not with the fetcher, so the
# sensors and the envelope can name them without importing the HTTP client.
IMAGE_ROOTS_SETTING = "STAGE_E_IMAGE_ROOTS"
ALLOWED_HOSTS_SETTING = "STAGE_E_FETCH_ALLOWED_HOSTS"
# The settings that can refuse a locator: a card they refuse waits on configuration.
REFUSING_SETTINGS = (ALLOWED_HOSTS_SETTING, IMAGE_ROOTS_SETTING)


def allow_list_fingerprint(image_roots: Sequence[Path | str], allowed_hosts: Sequence[str]) -> str:
    """A short digest of what the settings allow: a card refused under one fingerprint is tried again
    once the settings give another (a host or root added, or removed), and never on a timer."""
    roots = sorted(os.path.abspath(Path(root).expanduser()) for root in image_roots)
    hosts = sorted({host.lower() for host in allowed_hosts})
    return hashlib.sha256(json.dumps([roots, hosts]).encode()).hexdigest()[:16]


def settings_fingerprint(settings: Settings) -> str:
    """:func:`allow_list_fingerprint` of what ``settings`` allow (the fetcher it would build)."""
    return allow_list_fingerprint(settings.image_roots, settings.fetch_allowed_hosts)
