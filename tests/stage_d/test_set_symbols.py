"""Set symbols, issue 41 part 2: the importer stores each set's icon URI, ``stage-e catalog fetch-symbols``
renders each icon once through the guarded fetch (resumable, a bad SVG named), and Stage D's pure
ranking picks a set only by a clear margin.

The icons are Keyrune's SVGs in ``../shared/fixtures/set-symbols`` (GPL-3.0, read where they lie, never
copied here), served by the local art host; the tests that need them skip without the folder.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from stage_e_dagster.catalog.models import Expansion, Printing
from stage_e_dagster.catalog.symbol_shape import SHAPE_BYTES, shape_descriptor
from stage_e_dagster.catalog_import.scryfall import import_scryfall
from stage_e_dagster.catalog_import.set_symbols import (
    BAD_SVG,
    SymbolSvgError,
    store_symbol_folder,
    store_symbol_svg,
    svg_symbol_shape,
)
from stage_e_dagster.cli.errors import CliError
from stage_e_dagster.cli.main import app
from stage_e_dagster.stage_d.facts import load_printing_facts
from stage_e_dagster.stage_d.symbols import SYMBOL_MARGIN, rank_symbols, symbol_winner

from .art_server import ArtServer

SYMBOLS = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "set-symbols"
needs_symbols = pytest.mark.skipif(not SYMBOLS.is_dir(), reason=f"the set symbols are not at {SYMBOLS}")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scryfall"


def svg(code: str) -> bytes:
    return (SYMBOLS / f"{code}.svg").read_bytes()


def disc(radius: float, *, square: bool = False) -> bytes:
    yy, xx = np.mgrid[:40, :40]
    if square:
        mask = (abs(yy - 20) < radius) & (abs(xx - 20) < radius)
    else:
        mask = (yy - 20) ** 2 + (xx - 20) ** 2 < radius ** 2
    shape = shape_descriptor(mask)
    assert shape is not None and len(shape) == SHAPE_BYTES
    return shape


def test_rank_reports_sets_without_a_symbol_last_and_they_never_win() -> None:
    circle, square = disc(15), disc(15, square=True)
    ranking = rank_symbols(circle, {"sq": square, "ci": circle, "lea": None, "4ed": None})
    assert [code for code, _ in ranking] == ["ci", "sq", "4ed", "lea"]
    assert ranking[0][1] == 1.0 and ranking[2][1] is None
    assert symbol_winner(circle, {"sq": square, "ci": circle, "lea": None}) == "ci"
    assert symbol_winner(circle, {"lea": None, "4ed": None}) is None
    # Scryfall draws Alpha an icon, but its cards print none: never scored, whatever is stored.
    assert rank_symbols(circle, {"lea": circle, "sq": square}) == [("sq", rank_symbols(circle, {"sq": square})[0][1]),
                                                                   ("lea", None)]
    assert symbol_winner(circle, {"lea": circle}) is None
    assert symbol_winner(None, {"ci": circle}) is None


def test_the_winner_needs_a_clear_margin() -> None:
    circle = disc(15)
    # Two sets with the same symbol (a promo set shows its parent's icon): no margin, no winner.
    assert symbol_winner(circle, {"a": circle, "b": circle}) is None
    ranking = rank_symbols(circle, {"a": circle, "b": disc(14)})
    assert ranking[0][1] - ranking[1][1] < SYMBOL_MARGIN
    assert symbol_winner(circle, {"a": circle, "b": disc(14)}) is None


@needs_symbols
def test_keyrune_icons_render_and_tell_their_sets_apart() -> None:
    shapes = {code: svg_symbol_shape(svg(code)) for code in ("vis", "wth", "mir", "tmp", "all", "fem", "drk")}
    for code, shape in shapes.items():
        assert symbol_winner(shape, {**shapes, "lea": None}) == code
    # Filled, Ice Age's snowflake and Homelands' glyph overlap by 0.86: ranked right, but no clear winner.
    ice, hml = svg_symbol_shape(svg("ice")), svg_symbol_shape(svg("hml"))
    assert [code for code, _ in rank_symbols(ice, {"ice": ice, "hml": hml})] == ["ice", "hml"]
    assert symbol_winner(ice, {"ice": ice, "hml": hml}) is None
    with pytest.raises(SymbolSvgError, match=BAD_SVG):
        svg_symbol_shape(b"<svg this is not")
    with pytest.raises(SymbolSvgError, match=BAD_SVG):
        svg_symbol_shape(b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>')


def sets_file(tmp_path: Path, server: ArtServer, version: str = "1") -> Path:
    records = [{"object": "set", "id": str(uuid.UUID(int=n)), "code": code, "name": code.upper(),
                "released_at": "1997-01-01", "card_count": 1,
                "icon_svg_uri": server.url(f"/sets/{code}.svg") + f"?{version}"}
               for n, code in enumerate(("vis", "wth", "mir", "bad"), start=1)]
    path = tmp_path / f"sets-{version}.json"
    path.write_text(json.dumps({"object": "list", "has_more": False, "data": records}))
    return path


def shapes(engine: sa.Engine) -> dict[str, tuple[bytes | None, str | None]]:
    with engine.connect() as conn:
        return {code: (shape, uri) for code, shape, uri in conn.execute(
            sa.select(Expansion.code, Expansion.symbol_shape, Expansion.symbol_shape_uri))}


def fetch_symbols(*args: str) -> dict[str, object]:
    out = CliRunner().invoke(app, ["catalog", "fetch-symbols", "--json", *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@needs_symbols
def test_fetch_symbols_renders_each_icon_once_resumes_and_names_a_bad_svg(
        sqlite_engine: sa.Engine, server: ArtServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_DATABASE_URL", sqlite_engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", server.host)
    for code in ("vis", "wth", "mir"):
        server.images[f"/sets/{code}.svg"] = svg(code)
    server.images["/sets/bad.svg"] = b"<html>not an icon</html>"
    server.status["/sets/mir.svg"] = 404
    import_scryfall(sqlite_engine, FIXTURES / "cards.json", sets_path=sets_file(tmp_path, server))
    with sqlite_engine.connect() as conn:
        uris = dict(conn.execute(sa.select(Expansion.code, Expansion.symbol_svg_uri)).all())
    assert uris["vis"] == server.url("/sets/vis.svg?1")

    first = fetch_symbols()
    assert (first["pending"], first["rendered"], first["failed"]) == (4, 2, {BAD_SVG: 1, "not-found": 1})
    stored = shapes(sqlite_engine)
    assert stored["vis"] == (svg_symbol_shape(svg("vis")), server.url("/sets/vis.svg?1"))
    assert stored["mir"] == (None, None) and stored["bad"] == (None, None)

    del server.status["/sets/mir.svg"]
    server.requests.clear()
    second = fetch_symbols()
    assert (second["pending"], second["rendered"]) == (2, 1)
    assert sorted(server.paths()) == ["/sets/bad.svg", "/sets/mir.svg"]  # what was rendered is not fetched again

    # A new icon version: the re-import moves the URI, and the sets are rendered again.
    import_scryfall(sqlite_engine, FIXTURES / "cards.json", sets_path=sets_file(tmp_path, server, "2"))
    again = fetch_symbols("--limit", "2")
    assert (again["pending"], again["rendered"]) == (4, 2)


@needs_symbols
def test_fetch_symbols_stops_at_a_403(sqlite_engine: sa.Engine, server: ArtServer, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_DATABASE_URL", sqlite_engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", server.host)
    for code in ("vis", "wth", "mir", "bad"):
        server.images[f"/sets/{code}.svg"] = svg("vis")
    server.status["/sets/wth.svg"] = 403
    import_scryfall(sqlite_engine, FIXTURES / "cards.json", sets_path=sets_file(tmp_path, server))
    out = CliRunner().invoke(app, ["catalog", "fetch-symbols"])
    assert isinstance(out.exception, CliError) and "lockout" in str(out.exception)
    assert server.paths() == ["/sets/vis.svg", "/sets/wth.svg"]


@needs_symbols
def test_a_local_folder_of_icons_is_stored_and_read_back_with_the_printing_facts(sqlite_engine: sa.Engine) -> None:
    import_scryfall(sqlite_engine, FIXTURES / "cards.json", sets_path=FIXTURES / "sets.json")
    outcomes = store_symbol_folder(sqlite_engine, SYMBOLS)
    assert outcomes["ice"] == "stored" and outcomes["ice2"] == "no-such-set"
    assert store_symbol_svg(sqlite_engine, "nosuchset", svg("vis")) is False
    with Session(sqlite_engine) as session:
        facts = load_printing_facts(session, session.execute(sa.select(Printing.id)).scalars())
    by_code = {fact.set_code: fact.symbol_shape for fact in facts.values()}
    assert by_code["ice"] == svg_symbol_shape(svg("ice"))
