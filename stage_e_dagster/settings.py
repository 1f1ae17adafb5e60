"""One typed settings object, read from the ``STAGE_E_*`` environment variables by pydantic-settings.

Only this module and ``defs/resources.py`` read the environment; every lower layer takes
its values as arguments. Each field carries its type and bounds; a bad value fails at start with one
line naming the variable (``load_settings`` turns pydantic's report into that line).
"""

from __future__ import annotations

import hashlib
import json
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

ENV_PREFIX = "STAGE_E_"


# cgroup v2's CPU quota for this process's group ("max" or "QUOTA PERIOD").
CPU_MAX_FILE = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus() -> float:
    """CPUs this process may use: its CPU affinity, capped by a cgroup v2 quota (``cpu.max``) where set.

    In a container the host's CPU count says nothing about what the pod may use, so the envelope's
    defaults come from this."""
    try:
        count = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        count = float(os.cpu_count() or 1)
    try:
        quota, period = CPU_MAX_FILE.read_text().split()[:2]
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


# The environment ``load_settings`` was given, when it is not the process's (a test's mapping).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("stage_e_environ", default=None)


class _TrimmedEnvSource(EnvSettingsSource):
    """pydantic-settings' own environment source, over ``environ``, each value trimmed: a variable
    holding only spaces counts as unset, and ``" true "`` as ``true``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env_vars = {name.lower(): value.strip() for name, value in environ.items() if value.strip()}


def _split(raw: object, sep: str) -> tuple[str, ...]:
    parts = raw.split(sep) if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
    return tuple(str(part).strip() for part in parts if str(part).strip())


# Bounded numbers: NaN and infinity are refused by the model's config (``allow_inf_nan``).
PositiveCount = Annotated[int, Field(ge=1)]
# The most slots Dagster lets a pool have (``DAGSTER_MAX_GLOBAL_OP_CONCURRENCY_LIMIT``, 1000 by default):
# a larger dispatch cap would make every tick's pool write raise.
MAX_POOL_LIMIT = 1000


class Settings(BaseSettings):
    """The project's settings; field ``x`` is the variable ``STAGE_E_X``. An empty variable counts as unset."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True, allow_inf_nan=False
    )

    streaming_enabled: bool = False
    state_dir: Path = Field(default_factory=lambda: Path(".state").resolve())
    database_url: str = Field("", validate_default=True)  # empty: a SQLite file in the state folder
    micro_batch_size: PositiveCount | None = None  # None: batches sized by work (batch_target_s); set: a fixed count
    batch_target_s: Annotated[float, Field(ge=1)] = 200.0
    # How long an idle card_created tick keeps watching for new cards before it returns (at most one
    # daemon pass, 4 s): a card landing meanwhile is batched within a quarter second, not at the next pass.
    arrival_wait_s: Annotated[float, Field(ge=0, le=MAX_ARRIVAL_WAIT_S)] = 3.5
    max_concurrent_dispatches: Annotated[int, Field(ge=1, le=MAX_POOL_LIMIT)] = Field(default_factory=default_dispatch_cap)
    # CPU contention, where the kernel has PSI: ``some avg10``, the percent of the last 10 s in which a
    # runnable task waited for a CPU. Our own workers, one per CPU, leave it near 0; each busy task
    # beyond the CPUs adds about 100/CPUs. The bars 25/75 follow (on 2 CPUs: our 2 runs beside a
    # 2-process neighbour ~100, halve; our 1 beside it ~50 plus noise, hold), and a quiet 2-core
    # machine read 12-17 % with our two runs and 85-94 % with that neighbour (docs/operations.md).
    cpu_pressure_file: Path | None = Field(default_factory=default_cpu_pressure_file)
    cpu_pressure_ceiling: Annotated[float, Field(ge=0, le=100)] = 75.0
    cpu_pressure_soft: Annotated[float, Field(ge=0, le=100)] | None = None  # None: 1/3 of the hard bar (25)
    # Without PSI: the load average beyond this instance's running dispatch runs, in usable CPUs.
    host_load_ceiling: Annotated[float, Field(ge=0)] = Field(default_factory=usable_cpus)
    host_load_soft: Annotated[float, Field(ge=0)] | None = None  # None: 3/4 of the hard bar
    host_load_trip_after_s: Annotated[float, Field(ge=0)] = 120.0
    # A run worker's peak with the PP-OCR reader (issue 30) is 480-550 MB on the synthetic corpus and about
    # 535 MB on 12 Mpx phone photos (bench/stage_c.py, a dispatch run of the demo): a bar of 512 tripped
    # on ordinary batches. 768 sits above that peak with the headroom the Tesseract bar had.
    rss_mb_ceiling: Annotated[float, Field(ge=0)] = 768.0
    fetch_failure_rate_ceiling: Annotated[float, Field(ge=0, le=1)] = 0.01
    fetch_failure_window: PositiveCount = 500
    # Failures that cannot hide: batches failed in a row for one cause (a model that cannot load or run)
    # allowed before a trip (the third trips), and the share of cards read whose extractor raised among
    # the newest ``extractor_error_window`` cards read (0.05 x 100: the sixth such card trips).
    failed_batches_ceiling: Annotated[int, Field(ge=0)] = 2
    extractor_error_rate_ceiling: Annotated[float, Field(ge=0, le=1)] = 0.05
    extractor_error_window: PositiveCount = 100
    # Empty: ``<state>/images``. Read as ``:``-separated folders, not JSON.
    image_roots: Annotated[tuple[Path, ...], NoDecode] = Field((), validate_default=True)
    fetch_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()  # read comma-separated
    fetch_rate_per_sec: Annotated[float, Field(ge=0.01)] = 7.0
    fetch_timeout_s: Annotated[float, Field(ge=0.1)] = 15.0
    fetch_max_bytes: Annotated[int, Field(ge=1024)] = 25 * 1024 * 1024
    claim_ttl_s: PositiveCount = 900
    max_batch_attempts: PositiveCount = 3
    run_max_runtime_s: PositiveCount = 1800
    retention_days: PositiveCount = 7
    # How long an abandoned batch keeps its partition before retention may delete it.
    abandoned_grace_s: PositiveCount = 60
    # How Stage C reads an upload's text: "full" (the shipped reader: both ends of the text, closer where
    # nothing is confirmed) or "cheap" (one small look, three lines read, never closer: for tests and
    # smoke runs that only need Stage C to have run; it reads far less).
    ocr_pass: Literal["full", "cheap"] = "full"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment (``load_settings``'s mapping when given): no dotenv, no secrets dir."""
        environ = _ENVIRON.get()
        return init_settings, _TrimmedEnvSource(settings_cls, os.environ if environ is None else environ)

    @field_validator("state_dir", mode="after")
    @classmethod
    def _absolute_state_dir(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("database_url", mode="after")
    @classmethod
    def _database_url_or_default(cls, value: str, info: ValidationInfo) -> str:
        return value or default_database_url(info.data["state_dir"])

    @field_validator("cpu_pressure_file", mode="after")
    @classmethod
    def _expand_pressure_file(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("image_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> tuple[str, ...]:
        return _split(value, os.pathsep)

    @field_validator("image_roots", mode="after")
    @classmethod
    def _roots_or_default(cls, value: tuple[Path, ...], info: ValidationInfo) -> tuple[Path, ...]:
        if not value:
            return (info.data["state_dir"] / "images",)
        return tuple(root.expanduser().resolve() for root in value)

    @field_validator("fetch_allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> tuple[str, ...]:
        return tuple(host.lower() for host in _split(value, ","))

    @model_validator(mode="after")
    def _soft_bars_under_hard_bars(self) -> Settings:
        if self.cpu_pressure_soft_bar > self.cpu_pressure_ceiling:
            raise ValueError(
                f"STAGE_E_CPU_PRESSURE_SOFT={self.cpu_pressure_soft_bar:g} must not be above "
                f"STAGE_E_CPU_PRESSURE_CEILING={self.cpu_pressure_ceiling:g}"
            )
        if self.host_load_soft_bar > self.host_load_ceiling:
            raise ValueError(
                f"STAGE_E_HOST_LOAD_SOFT={self.host_load_soft_bar:g} must not be above "
                f"STAGE_E_HOST_LOAD_CEILING={self.host_load_ceiling:g}"
            )
        return self

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


# What each kind of pydantic error says about the value, after ``NAME='value'``.
_WHAT_IS_WRONG = {
    "int_parsing": "is not a whole number",
    "int_from_float": "is not a whole number",
    "int_type": "is not a whole number",
    "float_parsing": "is not a number",
    "float_type": "is not a number",
    "finite_number": "is not a number",
    "bool_parsing": "is not a boolean (use true or false)",
    "bool_type": "is not a boolean (use true or false)",
}


def _one_line(error: Mapping[str, Any]) -> str:
    """pydantic's first error as ``STAGE_E_NAME='value' what is wrong``: one line, naming the variable."""
    ctx = error.get("ctx") or {}
    if not error["loc"]:  # a check across fields (a soft bar above its hard bar) names its variables itself
        return str(ctx.get("error", error["msg"]))
    name = ENV_PREFIX + str(error["loc"][0]).upper()
    kind = error["type"]
    if kind == "greater_than_equal":
        wrong = f"must be at least {ctx['ge']:g}"
    elif kind == "less_than_equal":
        wrong = f"must be at most {ctx['le']:g}"
    else:
        wrong = _WHAT_IS_WRONG.get(kind, str(error["msg"]).lower())
    return " ".join(f"{name}={error['input']!r} {wrong}".split())


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from ``environ`` (default: the process environment).

    Raises :class:`SettingsError` with one line naming the first bad variable."""
    token = _ENVIRON.set(environ)
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(_one_line(exc.errors()[0])) from None
    finally:
        _ENVIRON.reset(token)


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
