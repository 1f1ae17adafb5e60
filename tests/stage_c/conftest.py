"""Stage C fixtures: rendered card images, a small seeded corpus, and a real HTTP image host on 127.0.0.1."""

from __future__ import annotations

import random
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

from stage_e_dagster.corpus.catalogue import build_catalogue
from stage_e_dagster.corpus.render import Variant, encode, render_card
from stage_e_dagster.stage_c.fetch import ImageFetcher


@pytest.fixture(scope="session")
def card_jpeg() -> bytes:
    """One modern-frame card, trimmed, as a JPEG upload."""
    _, specs = build_catalogue(random.Random(7), 30)
    printing = next(p for p in specs if p.style == "slash")
    variant = Variant(height=1000, jpeg_quality=90)
    return encode(render_card(printing, variant), variant)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that time out or stop reading early close the socket mid-answer: expected here


class ImageHost(BaseHTTPRequestHandler):
    """Routes that answer the way real image hosts do, good and bad."""

    image = b""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        port = self.server.server_address[1]
        if path == "/card.jpg":
            self._send(200, self.image, {"Content-Type": "image/jpeg"})
        elif path == "/html.jpg":
            self._send(200, b"<html>not a picture</html>", {"Content-Type": "text/html"})
        elif path == "/missing.jpg":
            self._send(404, b"gone")
        elif path == "/busy.jpg":
            self._send(429, b"slow down", {"Retry-After": "3"})
        elif path == "/busy-long.jpg":
            self._send(429, b"slow down", {"Retry-After": "120"})
        elif path == "/busy-date.jpg":
            when = formatdate(time.time() + 300, usegmt=True)
            self._send(503, b"come back later", {"Retry-After": when})
        elif path == "/bad-request.jpg":
            self._send(400, b"bad request")
        elif path == "/empty.jpg":
            self._send(200, b"", {"Content-Type": "image/jpeg"})
        elif path == "/unavailable.jpg":
            self._send(503, b"unavailable")
        elif path == "/forbidden.jpg":
            self._send(403, b"forbidden")
        elif path == "/broken.jpg":
            self._send(500, b"oops")
        elif path == "/slow.jpg":
            time.sleep(1.5)
            self._send(200, self.image)
        elif path == "/huge.jpg":
            self._send(200, b"\xff" * 300_000)
        elif path == "/huge-unsized.jpg":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for _ in range(40):
                self.wfile.write(b"\xff" * 10_000)
            self.close_connection = True
        elif path == "/hop.jpg":
            self._send(302, headers={"Location": f"http://127.0.0.1:{port}/card.jpg"})
        elif path == "/escape.jpg":
            self._send(302, headers={"Location": "http://images.invalid/card.jpg"})
        elif path == "/loop.jpg":
            self._send(302, headers={"Location": "/loop.jpg"})
        else:
            self._send(404)


@pytest.fixture(scope="session")
def image_host(card_jpeg: bytes) -> Iterator[str]:
    """Base URL of a real HTTP server in a thread; its host:port is what the allow-list names."""
    handler = type("Host", (ImageHost,), {"image": card_jpeg})
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def make_fetcher(engine: sa.Engine | None, roots: list[Path], hosts: list[str] = (),
                 **overrides: object) -> ImageFetcher:
    options: dict[str, object] = dict(timeout_s=0.5, max_bytes=200_000, rate_per_sec=1000.0)
    options.update(overrides)
    return ImageFetcher(engine=engine, image_roots=roots, allowed_hosts=list(hosts), **options)  # type: ignore[arg-type]
