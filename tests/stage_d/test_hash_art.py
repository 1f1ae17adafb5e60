"""``stage-e catalog hash-art`` against a real HTTP server in a thread, serving real images.

The printings come from the importer (records whose ``image_uris.art_crop`` point at the local
server), the server records each request's path and arrival time and answers what the test
tells it to, so the tests see what reached the host: which printings were fetched, how fast, and
that nothing more was asked after a 403.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from PIL import Image
from typer.testing import CliRunner

from stage_e_dagster.catalog.models import FetchPacer, Printing
from stage_e_dagster.catalog_import.art_hashes import SCRYFALL_RATE_PER_SEC
from stage_e_dagster.catalog_import.scryfall import import_scryfall
from stage_e_dagster.cli.errors import CliError
from stage_e_dagster.cli.main import app
from stage_e_dagster.stage_c.hashing import phash_int

from .art_server import ArtServer, art_jpeg

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scryfall"


def card_record(server: ArtServer, number: int, *, version: str = "1") -> dict[str, object]:
    path = f"/art_crop/front/{number}.jpg"
    return {"object": "card", "id": str(uuid.UUID(int=number)), "set": "tst", "set_name": "Test Set",
            "collector_number": str(number), "name": "Plague Rats", "lang": "en", "layout": "normal",
            "released_at": "1994-04-01",
            "image_uris": {"normal": server.url(f"/normal/{number}.jpg"),
                           "art_crop": server.url(path) + f"?{version}"}}


def import_records(engine: sa.Engine, tmp_path: Path, records: list[dict[str, object]]) -> None:
    path = tmp_path / f"cards-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(records))
    import_scryfall(engine, path)


def stored(engine: sa.Engine) -> dict[str, tuple[int | None, str | None]]:
    with engine.connect() as conn:
        return {n: (h, u) for n, h, u in conn.execute(
            sa.select(Printing.collector_number, Printing.art_phash, Printing.art_phash_url))}


@pytest.fixture
def cli_env(sqlite_url: str, server: ArtServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STAGE_E_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", server.host)
    return sqlite_url


@pytest.fixture
def cli_on_engine(engine: sa.Engine, server: ArtServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI pointed at ``engine``, SQLite or PostgreSQL (the pacer's row lives there too)."""
    monkeypatch.setenv("STAGE_E_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", server.host)


def hash_art(*args: str) -> dict[str, object]:
    out = CliRunner().invoke(app, ["catalog", "hash-art", "--json", *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_import_keeps_the_art_crop_url_of_the_card_or_its_front_face(sqlite_engine: sa.Engine) -> None:
    records = json.loads((FIXTURES / "cards.json").read_text())
    import_scryfall(sqlite_engine, FIXTURES / "cards.json")
    with sqlite_engine.connect() as conn:
        urls = dict(conn.execute(sa.select(Printing.scryfall_id, Printing.art_crop_url)).all())
    single = next(r for r in records if "image_uris" in r and r["layout"] == "normal")
    faced = next(r for r in records if "image_uris" not in r and r["layout"] == "transform")
    assert urls[single["id"]] == single["image_uris"]["art_crop"]
    assert urls[faced["id"]] == faced["card_faces"][0]["image_uris"]["art_crop"]
    assert urls[faced["id"]].startswith("https://cards.scryfall.io/art_crop/front/")


def test_hash_art_stores_hashes_paces_and_resumes(engine: sa.Engine, cli_on_engine: None, server: ArtServer,
                                                   tmp_path: Path) -> None:
    for n in range(1, 6):
        server.images[f"/art_crop/front/{n}.jpg"] = art_jpeg(n)
    server.status["/art_crop/front/3.jpg"] = 404  # missing on the first run
    import_records(engine, tmp_path, [card_record(server, n) for n in range(1, 6)])

    started = time.time()
    first = hash_art()
    assert (first["pending"], first["hashed"], first["failed"], first["stopped"]) == (5, 4, {"not-found": 1}, None)
    assert sorted(server.paths()) == [f"/art_crop/front/{n}.jpg" for n in range(1, 6)]
    # Paced at Scryfall's 10/s through the shared pacer: five slots were taken one interval apart, so
    # the next free one is at least five intervals after the run began, and the fifth request
    # reached the host no sooner than four intervals after it.
    with engine.connect() as conn:
        next_slot = conn.execute(sa.select(FetchPacer.next_slot_at).where(FetchPacer.name == "127.0.0.1")).scalar_one()
    assert next_slot - started >= 5 / SCRYFALL_RATE_PER_SEC - 0.01
    assert server.requests[-1][1] - started >= 4 / SCRYFALL_RATE_PER_SEC - 0.01
    rows = stored(engine)
    for n in (1, 2, 4, 5):
        expected = phash_int(Image.open(io.BytesIO(art_jpeg(n))))
        assert rows[str(n)] == (expected, server.url(f"/art_crop/front/{n}.jpg?1"))
    assert rows["3"] == (None, None)

    del server.status["/art_crop/front/3.jpg"]
    server.requests.clear()
    second = hash_art()
    assert (second["pending"], second["hashed"]) == (1, 1)
    assert server.paths() == ["/art_crop/front/3.jpg"]  # the hashed ones are not fetched again
    assert stored(engine)["3"][0] == phash_int(Image.open(io.BytesIO(art_jpeg(3))))

    server.requests.clear()
    assert (hash_art()["pending"], hash_art()["hashed"]) == (0, 0)
    assert server.requests == []

    # Scryfall changed printing 2's image: the re-import gives a new URL, and only that one is fetched again.
    server.images["/art_crop/front/2.jpg"] = art_jpeg(202)
    import_records(engine, tmp_path, [card_record(server, 2, version="2")])
    again = hash_art()
    assert (again["pending"], again["hashed"]) == (1, 1)
    assert server.paths() == ["/art_crop/front/2.jpg"]
    assert stored(engine)["2"] == (phash_int(Image.open(io.BytesIO(art_jpeg(202)))),
                                          server.url("/art_crop/front/2.jpg?2"))


def test_hash_art_stops_at_the_first_403(cli_env: str, sqlite_engine: sa.Engine, server: ArtServer,
                                         tmp_path: Path) -> None:
    for n in range(1, 5):
        server.images[f"/art_crop/front/{n}.jpg"] = art_jpeg(n)
    server.status["/art_crop/front/2.jpg"] = 403
    import_records(sqlite_engine, tmp_path, [card_record(server, n) for n in range(1, 5)])

    out = CliRunner().invoke(app, ["catalog", "hash-art"])
    assert isinstance(out.exception, CliError)
    assert "stopped (lockout)" in str(out.exception)
    assert f"image host 127.0.0.1 answered 403 for {server.url('/art_crop/front/2.jpg?1')}" in str(out.exception)
    assert "1 hashes stored" in str(out.exception)
    # Nothing was asked of the host after its 403.
    assert server.paths() == ["/art_crop/front/1.jpg", "/art_crop/front/2.jpg"]
    rows = stored(sqlite_engine)
    assert rows["1"][0] is not None and [rows[n][0] for n in "234"] == [None, None, None]

    # Once the host answers again, the run resumes where it stopped.
    del server.status["/art_crop/front/2.jpg"]
    server.requests.clear()
    assert hash_art()["hashed"] == 3
    assert sorted(server.paths()) == [f"/art_crop/front/{n}.jpg" for n in (2, 3, 4)]


def test_hash_art_refuses_a_host_the_settings_do_not_allow(cli_env: str, sqlite_engine: sa.Engine,
                                                           server: ArtServer, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    server.images["/art_crop/front/1.jpg"] = art_jpeg(1)
    import_records(sqlite_engine, tmp_path, [card_record(server, 1)])
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", "cards.scryfall.io")
    out = CliRunner().invoke(app, ["catalog", "hash-art"])
    assert isinstance(out.exception, CliError)
    assert "stopped (host-not-allowed)" in str(out.exception)
    assert "STAGE_E_FETCH_ALLOWED_HOSTS" in str(out.exception)
    assert server.requests == []


def test_hash_art_counts_an_undecodable_answer_and_keeps_it_pending(
    cli_env: str, sqlite_engine: sa.Engine, server: ArtServer, tmp_path: Path
) -> None:
    server.images["/art_crop/front/1.jpg"] = b"<html>maintenance</html>"
    server.images["/art_crop/front/2.jpg"] = art_jpeg(2)
    import_records(sqlite_engine, tmp_path, [card_record(server, n) for n in (1, 2)])
    report = hash_art()
    assert (report["hashed"], report["failed"]) == (1, {"not-an-image": 1})
    assert stored(sqlite_engine)["1"] == (None, None)
    assert hash_art()["pending"] == 1


def test_hash_art_limit_and_a_throttled_answer_leave_the_rest_pending(
    cli_env: str, sqlite_engine: sa.Engine, server: ArtServer, tmp_path: Path
) -> None:
    for n in range(1, 5):
        server.images[f"/art_crop/front/{n}.jpg"] = art_jpeg(n)
    server.status["/art_crop/front/1.jpg"] = 429
    import_records(sqlite_engine, tmp_path, [card_record(server, n) for n in range(1, 5)])

    first = hash_art("--limit", "2")
    assert (first["pending"], first["hashed"], first["throttled"], first["failed"]) == (4, 1, 1, {})
    assert server.paths() == ["/art_crop/front/1.jpg", "/art_crop/front/2.jpg"]
    with sqlite_engine.connect() as conn:  # the 429 widened the shared pacer's interval
        scale = conn.execute(sa.select(FetchPacer.interval_scale).where(FetchPacer.name == "127.0.0.1")).scalar_one()
    assert scale > 1.0

    del server.status["/art_crop/front/1.jpg"]
    server.requests.clear()
    rest = hash_art()
    assert (rest["pending"], rest["hashed"]) == (3, 3)
    assert sorted(server.paths()) == [f"/art_crop/front/{n}.jpg" for n in (1, 3, 4)]
    assert all(h is not None for h, _ in stored(sqlite_engine).values())
