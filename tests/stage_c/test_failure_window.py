"""The fetch-failure bar measures the image host: broken uploads and refusals never count in the
window; timeouts, refused connections, 5xx and unexpected 4xx do. Real images, a real HTTP host,
the real catalogue on both back ends."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sqlalchemy as sa
from PIL import Image

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card
from stage_e_dagster.envelope.bars import Ceilings, EnvelopeSignals, first_breach
from stage_e_dagster.envelope.fetch_window import window_counts
from stage_e_dagster.stage_c.run import run_stage_c

from .conftest import make_fetcher

# The shipped defaults: 0.01 x 500, so the 6th failure in the window trips.
CEILINGS = Ceilings(host_load=1e9, rss_mb=1e9, fetch_failure_rate=0.01, fetch_failure_window=500)


def add_cards(engine: sa.Engine, locators: list[str]) -> list[int]:
    with engine.begin() as conn:
        return [int(conn.execute(sa.insert(Card).values(identifier=f"c{i}-{loc}", name="Card", image_locator=loc)
                                 .returning(Card.id)).scalar_one()) for i, loc in enumerate(locators)]


def breach(engine: sa.Engine) -> tuple[int, int, str | None]:
    with session_scope(engine) as session:
        counts = window_counts(session, CEILINGS.fetch_failure_window)
    found = first_breach(EnvelopeSignals(fetch_failures=counts.failures, fetch_total=counts.total), CEILINGS)
    return counts.failures, counts.total, None if found is None else found.bar


def small_png() -> bytes:
    """A small decodable image: a good fetch for the window, cheap to extract."""
    out = io.BytesIO()
    Image.linear_gradient("L").resize((126, 176)).convert("RGB").save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def broken_uploads(tmp_path: Path, card_jpeg: bytes) -> Path:
    """Every kind of upload that is the card's own problem, and some good ones."""
    root = tmp_path / "uploads"
    root.mkdir()
    (root / "good.png").write_bytes(small_png())
    (root / "truncated.jpg").write_bytes(card_jpeg[: len(card_jpeg) // 3])
    (root / "corrupt.jpg").write_bytes(b"\xff\xd8\xff" + bytes(range(256)) * 8)
    (root / "empty.jpg").write_bytes(b"")
    (root / "html.jpg").write_bytes(b"<html><body>503 Service Unavailable</body></html>\n")
    (root / "oversized.jpg").write_bytes(b"\xff" * 300_000)
    bomb = io.BytesIO()
    Image.new("1", (9000, 9000)).save(bomb, format="PNG")
    (root / "bomb.png").write_bytes(bomb.getvalue())
    return root


def test_broken_uploads_and_refusals_never_count_toward_the_bar(engine: sa.Engine, broken_uploads: Path,
                                                                 image_host: str, tmp_path: Path) -> None:
    host = image_host.split("//", 1)[1]
    bad = ["truncated.jpg", "corrupt.jpg", "empty.jpg", "html.jpg", "oversized.jpg", "bomb.png", "missing.jpg"]
    locators = [(broken_uploads / name).as_uri() for name in bad]
    locators += [(broken_uploads / "good.png").as_uri()]
    locators += [f"{image_host}/html.jpg", f"{image_host}/huge.jpg", f"{image_host}/empty.jpg"]  # served, but broken
    # refused for the card's own reason
    locators += [f"file://{broken_uploads}/../escape.jpg", "ftp://example.org/card.jpg"]
    locators += [(tmp_path / "elsewhere.jpg").as_uri(), "http://images.example.org/card.jpg"]  # refused by the settings
    ids = add_cards(engine, locators)
    with make_fetcher(engine, [broken_uploads], [host]) as fetcher:
        report = run_stage_c(engine, ids, writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())
    assert report.rejected == 12 and report.terminal == 12 and report.config_refused == 2
    assert report.fetch_failures == 0
    failures, total, bar = breach(engine)
    assert (failures, bar) == (0, None)
    assert total == 13  # every fetch is in the window (the settings refusals fetched nothing)


@pytest.mark.parametrize("path", ["/broken.jpg", "/slow.jpg", "/missing.jpg", "/bad-request.jpg", "refused"])
def test_host_trouble_counts_and_the_sixth_failure_trips(engine: sa.Engine, broken_uploads: Path, image_host: str,
                                                        path: str) -> None:
    allowed = [image_host.split("//", 1)[1], "127.0.0.1:9"]
    base = "http://127.0.0.1:9/card.jpg?n=" if path == "refused" else f"{image_host}{path}?n="
    ids = add_cards(engine, [(broken_uploads / "good.png").as_uri()] + [base + str(i) for i in range(5)])
    with make_fetcher(engine, [broken_uploads], allowed, timeout_s=0.3) as fetcher:
        first = run_stage_c(engine, ids, writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())
        assert (first.fetch_failures, first.rejected) == (5, 0)
        assert breach(engine) == (5, 6, None)  # 5 of 500 holds
        [sixth] = add_cards(engine, [base + "6"])
        run_stage_c(engine, [sixth], writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())
    assert breach(engine) == (6, 7, "fetch_failure_rate")
