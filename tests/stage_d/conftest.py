"""Stage D test fixtures: the local art host ``hash-art`` fetches from."""

from __future__ import annotations

from typing import Iterator

import pytest

from .art_server import ArtServer


@pytest.fixture
def server() -> Iterator[ArtServer]:
    srv = ArtServer()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    srv.thread.join(timeout=10)
