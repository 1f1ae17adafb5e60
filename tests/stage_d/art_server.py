"""A real HTTP server in a thread that serves art crops the way Scryfall's image host does, for
``hash-art`` tests: images by path, a status per path to answer instead, and a log of requests."""

from __future__ import annotations

import io
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stage_e_dagster.corpus.art import render_art


def art_jpeg(seed: int) -> bytes:
    """A real JPEG of the corpus's procedural art, the size of a Scryfall art crop."""
    buf = io.BytesIO()
    render_art(seed, (626, 457)).save(buf, format="JPEG", quality=88)
    return buf.getvalue()


class ArtServer:
    """A threaded http.server: ``images`` by path, ``status`` overrides by path, a log of requests."""

    def __init__(self) -> None:
        self.images: dict[str, bytes] = {}
        self.status: dict[str, int] = {}
        self.requests: list[tuple[str, float]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?")[0]
                server.requests.append((path, time.time()))
                code = server.status.get(path, 200 if path in server.images else 404)
                body = server.images[path] if code == 200 else b"no"
                self.send_response(code)
                self.send_header("Content-Type", "image/jpeg" if code == 200 else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]

