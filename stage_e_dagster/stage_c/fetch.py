"""Image fetch: ``file://`` under the configured roots and ``http(s)://`` to allow-listed hosts.

One pooled HTTP client with connect and read timeouts and a byte ceiling; redirects are followed
by hand so every hop is checked against the allow-list. Every request to a host takes a slot from
the global pacer first. A 403 from an image host raises :class:`FetchLockout`; every other result
is a :class:`FetchResult` with a named outcome, which says whose problem it is: the host's
(``failed``), the upload's own (``rejected``), or the settings' (``config-refused``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Sequence
from urllib.parse import unquote, urljoin, urlsplit

import sqlalchemy as sa

from ..settings import (  # noqa: F401  (re-exported: the fetcher's refusals name these settings)
    ALLOWED_HOSTS_SETTING,
    IMAGE_ROOTS_SETTING,
    REFUSING_SETTINGS,
    allow_list_fingerprint,
    settings_fingerprint,
)
from . import pacer

if TYPE_CHECKING:
    import httpx

    from ..settings import Settings

REDIRECT_STATUSES = (301, 302, 303, 307, 308)
THROTTLE_STATUSES = (429, 503)
LOCKOUT_STATUSES = (403,)
# Failures worth another try later (bounded by the card's retry budget); the rest are permanent.
TRANSIENT_ERRORS = frozenset({"timeout", "connection-error", "server-error"})

# What a fetch can come to. Only FAILED is the image host's trouble and counts toward the
# fetch-failure bar; REJECTED is the upload's own problem (a terminal record for the card);
# CONFIG_REFUSED means the settings forbid the locator, so nothing about the card is known.
OK, THROTTLED, FAILED, REJECTED, CONFIG_REFUSED = "ok", "throttled", "failed", "rejected", "config-refused"


class FetchLockout(Exception):
    """A 403 from an image host: the host is refusing us, and Stage C must stop at once."""

    def __init__(self, host: str, status_code: int, locator: str):
        super().__init__(f"image host {host} answered {status_code} for {locator}")
        self.host = host
        self.status_code = status_code
        self.locator = locator


@dataclass(frozen=True)
class FetchResult:
    """One fetch: ``ok`` with the bytes, ``throttled`` (defer, not a failure), ``failed`` (the host's
    trouble), ``rejected`` (the upload's own problem) or ``config-refused`` (``setting`` forbids it)."""

    outcome: str  # ok | throttled | failed | rejected | config-refused
    locator: str
    data: bytes | None = None
    error_class: str | None = None
    status_code: int | None = None
    host: str | None = None
    latency_ms: float = 0.0
    retry_after_s: float | None = None
    setting: str | None = None  # config-refused: the variable that would allow the locator
    detail: str | None = None  # config-refused: what to change, in a sentence

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
        # The roots as configured (not following symlinks): a locator written under one of these is
        # allowed by the settings even when the root itself is a symlink.
        self._written_roots = tuple(Path(os.path.abspath(Path(root).expanduser())) for root in image_roots)
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.settings_fingerprint = allow_list_fingerprint(image_roots, allowed_hosts)
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.rate_per_sec = rate_per_sec
        self.max_redirects = max_redirects
        self._connect_timeout_s = connect_timeout_s or min(timeout_s, 5.0)
        self._transport = transport
        # The HTTP client (and httpx, 0.2 s of imports) only once a locator is a URL: a run over local
        # uploads, the embedded set-up's, starts its first card that much sooner.
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout_s, connect=self._connect_timeout_s), follow_redirects=False,
                    transport=self._transport, limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
                    headers={"User-Agent": "stage-e-dagster image fetch"},
                )
            return self._client

    @classmethod
    def from_settings(cls, settings: "Settings", engine: sa.Engine | None) -> "ImageFetcher":
        return cls(engine=engine, image_roots=settings.image_roots, allowed_hosts=settings.fetch_allowed_hosts,
                   timeout_s=settings.fetch_timeout_s, max_bytes=settings.fetch_max_bytes,
                   rate_per_sec=settings.fetch_rate_per_sec)

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
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
            result = FetchResult(REJECTED, locator, error_class="unsupported-locator")
        return _with_latency(result, started)

    # -- file:// -------------------------------------------------------------------------------
    def resolve_file(self, locator: str) -> Path | FetchResult:
        """The real path of a ``file://`` locator inside an image root, or the refusal.

        A path written outside every root is refused by the settings (``config-refused``, fix
        ``STAGE_E_IMAGE_ROOTS``); one written inside a root that escapes it (``..``, a symlink) or a
        locator no setting could allow is the upload's own problem (``rejected``).
        """
        parts = urlsplit(locator)
        if parts.netloc not in ("", "localhost"):
            return FetchResult(REJECTED, locator, error_class="unsupported-locator")
        raw = unquote(parts.path)
        if not raw or "\x00" in raw:
            return FetchResult(REJECTED, locator, error_class="unsupported-locator")
        path = Path(raw)
        if not path.is_absolute():
            return FetchResult(REJECTED, locator, error_class="unsupported-locator")
        # is_relative_to is lexical: '..' and symlinks are not followed here.
        if not any(path.is_relative_to(root) for root in (*self._written_roots, *self.image_roots)):
            roots = os.pathsep.join(str(r) for r in self._written_roots) or "(none)"
            return FetchResult(
                CONFIG_REFUSED, locator, error_class="outside-image-roots", setting=IMAGE_ROOTS_SETTING,
                detail=f"{raw} is outside {IMAGE_ROOTS_SETTING} ({roots}); add its folder to {IMAGE_ROOTS_SETTING}",
            )
        # resolve() follows symlinks and removes '..', so an escape by either lands outside every root.
        real = path.resolve(strict=False)
        if not any(real == root or real.is_relative_to(root) for root in self.image_roots):
            return FetchResult(REJECTED, locator, error_class="escapes-image-roots")
        return real

    def _fetch_file(self, locator: str) -> FetchResult:
        real = self.resolve_file(locator)
        if isinstance(real, FetchResult):
            return real
        try:
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return FetchResult(REJECTED, locator, error_class="not-found")
        except OSError:
            return FetchResult(REJECTED, locator, error_class="unreadable-file")
        with os.fdopen(fd, "rb") as handle:
            if not os.path.isfile(real):
                return FetchResult(REJECTED, locator, error_class="not-found")
            if os.fstat(handle.fileno()).st_size > self.max_bytes:
                return FetchResult(REJECTED, locator, error_class="too-large")
            data = handle.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            return FetchResult(REJECTED, locator, error_class="too-large")
        return FetchResult(OK, locator, data=data)

    # -- http(s):// ----------------------------------------------------------------------------
    def _fetch_http(self, locator: str) -> FetchResult:
        import httpx

        url = locator
        for hop in range(self.max_redirects + 1):
            host, host_port = _host_entry(url)
            if not host:
                return FetchResult(REJECTED, locator, error_class="unsupported-locator")
            if not self.host_allowed(url) and hop > 0:
                # The upload's URL sent us off the allow-list: its own doing, not a setting to widen.
                return FetchResult(REJECTED, locator, error_class="redirect-not-allowed", host=host)
            if not self.host_allowed(url):
                # The allow-list, not the card, refuses this: fixing the setting lets the card through.
                return FetchResult(
                    CONFIG_REFUSED, locator, error_class="host-not-allowed", host=host, setting=ALLOWED_HOSTS_SETTING,
                    detail=f"host {host_port} is not in {ALLOWED_HOSTS_SETTING}; add it to fetch from it",
                )
            if self.engine is not None:
                pacer.wait_for_slot(self.engine, host, self.rate_per_sec)
            try:
                result, location = self._request(locator, url, host)
            except httpx.TimeoutException:
                return FetchResult(FAILED, locator, error_class="timeout", host=host)
            except httpx.TransportError:
                return FetchResult(FAILED, locator, error_class="connection-error", host=host)
            if location is None:
                if self.engine is not None:
                    if result.outcome == THROTTLED:
                        pacer.back_off(self.engine, host, result.retry_after_s)
                    elif result.outcome == OK:
                        pacer.relax(self.engine, host)
                return result
            url = location
        return FetchResult(FAILED, locator, error_class="too-many-redirects", host=host)

    def _request(self, locator: str, url: str, host: str) -> tuple[FetchResult, str | None]:
        with self._http().stream("GET", url) as response:
            status = response.status_code
            if status in REDIRECT_STATUSES and "location" in response.headers:
                return FetchResult(FAILED, locator, status_code=status, host=host), urljoin(
                    url, response.headers["location"]
                )
            if status in LOCKOUT_STATUSES:
                raise FetchLockout(host, status, locator)
            if status in THROTTLE_STATUSES:
                return FetchResult(THROTTLED, locator, status_code=status, host=host,
                                   retry_after_s=_retry_after(response)), None
            # Any other error status is the host's answer, not the upload's: it counts toward the
            # bar, so a host that starts answering 404 (or 400) for everything trips it instead of
            # quietly marking the catalogue terminal.
            if status in (404, 410):
                return FetchResult(FAILED, locator, error_class="not-found", status_code=status, host=host), None
            if status >= 500:
                return FetchResult(FAILED, locator, error_class="server-error", status_code=status, host=host), None
            if status != 200:
                return FetchResult(FAILED, locator, error_class="http-error", status_code=status, host=host), None
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.max_bytes:
                return FetchResult(REJECTED, locator, error_class="too-large", status_code=status, host=host), None
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > self.max_bytes:
                    return FetchResult(REJECTED, locator, error_class="too-large", status_code=status,
                                       host=host), None
                chunks.append(chunk)
            return FetchResult(OK, locator, data=b"".join(chunks), status_code=status, host=host), None


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return max(seconds, 0.0)


def _with_latency(result: FetchResult, started: float) -> FetchResult:
    from dataclasses import replace

    return replace(result, latency_ms=(time.perf_counter() - started) * 1000)
