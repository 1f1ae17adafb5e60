"""Image fetch: ``file://`` under the configured roots and ``http(s)://`` to allow-listed hosts.

One pooled HTTP client with connect and read timeouts and a byte ceiling; redirects are followed
by hand so every hop is checked against the allow-list. Every request to a host takes a slot from
the global pacer first. A 403 from an image host raises :class:`FetchLockout`; every other result
is a :class:`FetchResult` with a named outcome.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence
from urllib.parse import unquote, urljoin, urlsplit

import httpx
import sqlalchemy as sa

from . import pacer

if TYPE_CHECKING:
    from ..settings import Settings

REDIRECT_STATUSES = (301, 302, 303, 307, 308)
THROTTLE_STATUSES = (429, 503)
LOCKOUT_STATUSES = (403,)
# Failures worth another try later (bounded by the card's retry budget); the rest are permanent.
TRANSIENT_ERRORS = frozenset({"timeout", "connection-error", "server-error"})


class FetchLockout(Exception):
    """A 403 from an image host: the host is refusing us, and Stage C must stop at once."""

    def __init__(self, host: str, status_code: int, locator: str):
        super().__init__(f"image host {host} answered {status_code} for {locator}")
        self.host = host
        self.status_code = status_code
        self.locator = locator


@dataclass(frozen=True)
class FetchResult:
    """One fetch: ``ok`` with the bytes, ``throttled`` (defer, not a failure) or ``failed`` with a named class."""

    outcome: str  # ok | throttled | failed
    locator: str
    data: bytes | None = None
    error_class: str | None = None
    status_code: int | None = None
    host: str | None = None
    latency_ms: float = 0.0
    retry_after_s: float | None = None

    @property
    def transient(self) -> bool:
        return self.error_class in TRANSIENT_ERRORS


def _host_entry(url: httpx.URL | str) -> tuple[str, str]:
    parts = urlsplit(str(url))
    host = (parts.hostname or "").lower()
    return host, f"{host}:{parts.port}" if parts.port else host


class ImageFetcher:
    """Fetches card images; one instance per process or run, closed with :meth:`close`."""

    def __init__(self, *, engine: sa.Engine | None, image_roots: Sequence[Path | str],
                 allowed_hosts: Sequence[str], timeout_s: float, max_bytes: int, rate_per_sec: float,
                 connect_timeout_s: float | None = None, max_redirects: int = 5,
                 transport: httpx.BaseTransport | None = None):
        self.engine = engine
        self.image_roots = tuple(Path(root).expanduser().resolve() for root in image_roots)
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.rate_per_sec = rate_per_sec
        self.max_redirects = max_redirects
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s or min(timeout_s, 5.0))
        self._client = httpx.Client(
            timeout=timeout, follow_redirects=False, transport=transport,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
            headers={"User-Agent": "stage-e-dagster image fetch"},
        )

    @classmethod
    def from_settings(cls, settings: "Settings", engine: sa.Engine | None) -> "ImageFetcher":
        return cls(engine=engine, image_roots=settings.image_roots, allowed_hosts=settings.fetch_allowed_hosts,
                   timeout_s=settings.fetch_timeout_s, max_bytes=settings.fetch_max_bytes,
                   rate_per_sec=settings.fetch_rate_per_sec)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "ImageFetcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host_allowed(self, url: str) -> bool:
        host, host_port = _host_entry(url)
        return bool(host) and (host in self.allowed_hosts or host_port in self.allowed_hosts)

    # -- entry point ---------------------------------------------------------------------------
    def fetch(self, locator: str) -> FetchResult:
        """Fetch one locator. Raises :class:`FetchLockout` on a 403 from an image host."""
        scheme = urlsplit(locator).scheme.lower()
        started = time.perf_counter()
        if scheme == "file":
            result = self._fetch_file(locator)
        elif scheme in ("http", "https"):
            result = self._fetch_http(locator)
        else:
            result = FetchResult("failed", locator, error_class="unsupported-locator")
        return _with_latency(result, started)

    # -- file:// -------------------------------------------------------------------------------
    def resolve_file(self, locator: str) -> Path | str:
        """The real path of a ``file://`` locator inside an image root, or a named refusal."""
        parts = urlsplit(locator)
        if parts.netloc not in ("", "localhost"):
            return "outside-image-roots"
        raw = unquote(parts.path)
        if not raw or "\x00" in raw:
            return "unsupported-locator"
        path = Path(raw)
        if not path.is_absolute():
            return "outside-image-roots"
        # resolve() follows symlinks and removes '..', so an escape by either lands outside every root.
        real = path.resolve(strict=False)
        if not any(real == root or real.is_relative_to(root) for root in self.image_roots):
            return "outside-image-roots"
        return real

    def _fetch_file(self, locator: str) -> FetchResult:
        real = self.resolve_file(locator)
        if isinstance(real, str):
            return FetchResult("failed", locator, error_class=real)
        try:
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return FetchResult("failed", locator, error_class="not-found")
        except OSError:
            return FetchResult("failed", locator, error_class="unreadable-file")
        with os.fdopen(fd, "rb") as handle:
            if not os.path.isfile(real):
                return FetchResult("failed", locator, error_class="not-found")
            if os.fstat(handle.fileno()).st_size > self.max_bytes:
                return FetchResult("failed", locator, error_class="too-large")
            data = handle.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            return FetchResult("failed", locator, error_class="too-large")
        return FetchResult("ok", locator, data=data)

    # -- http(s):// ----------------------------------------------------------------------------
    def _fetch_http(self, locator: str) -> FetchResult:
        url = locator
        for _hop in range(self.max_redirects + 1):
            host, _ = _host_entry(url)
            if not self.host_allowed(url):
                error = "host-not-allowed" if url == locator else "redirect-not-allowed"
                return FetchResult("failed", locator, error_class=error, host=host or None)
            if self.engine is not None:
                pacer.wait_for_slot(self.engine, host, self.rate_per_sec)
            try:
                result, location = self._request(locator, url, host)
            except httpx.TimeoutException:
                return FetchResult("failed", locator, error_class="timeout", host=host)
            except httpx.TransportError:
                return FetchResult("failed", locator, error_class="connection-error", host=host)
            if location is None:
                if self.engine is not None:
                    if result.outcome == "throttled":
                        pacer.back_off(self.engine, host, result.retry_after_s)
                    elif result.outcome == "ok":
                        pacer.relax(self.engine, host)
                return result
            url = location
        return FetchResult("failed", locator, error_class="too-many-redirects", host=host)

    def _request(self, locator: str, url: str, host: str) -> tuple[FetchResult, str | None]:
        with self._client.stream("GET", url) as response:
            status = response.status_code
            if status in REDIRECT_STATUSES and "location" in response.headers:
                return FetchResult("failed", locator, status_code=status, host=host), urljoin(
                    url, response.headers["location"]
                )
            if status in LOCKOUT_STATUSES:
                raise FetchLockout(host, status, locator)
            if status in THROTTLE_STATUSES:
                return FetchResult("throttled", locator, status_code=status, host=host,
                                   retry_after_s=_retry_after(response)), None
            if status in (404, 410):
                return FetchResult("failed", locator, error_class="not-found", status_code=status, host=host), None
            if status >= 500:
                return FetchResult("failed", locator, error_class="server-error", status_code=status, host=host), None
            if status != 200:
                return FetchResult("failed", locator, error_class="http-error", status_code=status, host=host), None
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.max_bytes:
                return FetchResult("failed", locator, error_class="too-large", status_code=status, host=host), None
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > self.max_bytes:
                    return FetchResult("failed", locator, error_class="too-large", status_code=status,
                                       host=host), None
                chunks.append(chunk)
            return FetchResult("ok", locator, data=b"".join(chunks), status_code=status, host=host), None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return float(value)
    except ValueError:
        return None


def _with_latency(result: FetchResult, started: float) -> FetchResult:
    from dataclasses import replace

    return replace(result, latency_ms=(time.perf_counter() - started) * 1000)
