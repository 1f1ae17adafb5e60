"""The Scryfall import against the real sample in tests/fixtures/scryfall (see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from PIL import Image
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Expansion, Printing
from stage_e_dagster.catalog_import.scryfall import ScryfallImportError, import_scryfall
from stage_e_dagster.stage_c.hashing import art_phash
from stage_e_dagster.stage_d.name_index import get_name_index

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scryfall"
CARDS, SETS = FIXTURES / "cards.json", FIXTURES / "sets.json"


def printings(engine: sa.Engine) -> dict[tuple[str, str, str], tuple]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(Expansion.code, Printing.collector_number, Printing.lang, Printing.name, Printing.layout,
                      Printing.artist, Printing.border_color, Printing.frame, Printing.released_at)
            .join(Expansion, Expansion.id == Printing.expansion_id)
        ).all()
    return {(r[0], r[1], r[2]): tuple(r[3:]) for r in rows}


def test_layouts_numbers_and_languages(engine: sa.Engine) -> None:
    report = import_scryfall(engine, CARDS, sets_path=SETS, batch_size=30)
    assert report.records_read == 103
    assert dict(report.skipped) == {"layout-token": 2, "layout-double_faced_token": 1, "layout-emblem": 1,
                                    "layout-art_series": 1}
    assert report.printings_inserted == 98 and report.expansions_inserted == 50
    got = printings(engine)
    assert len(got) == 98
    for key in [("fem", "74a", "en"), ("oarc", "1★", "en"), ("khm", "A-237", "en"), ("plst", "AKH-2", "en"),
                ("plst", "10E-182", "en"), ("phop", "P1", "en"), ("pneo", "266p", "en"), ("sld", "7099", "en")]:
        assert key in got, key
    assert got[("ren", "158", "fr")][0] == "Sylvan Library"
    assert got[("isd", "51", "en")][:2] == ("Delver of Secrets // Insectile Aberration", "transform")
    assert got[("plc", "112", "en")][:2] == ("Boom // Bust", "split")
    assert got[("bok", "3", "en")][1] == "flip"
    assert got[("znr", "40", "en")][2] == "Johannes Voss"  # artist taken from the faces
    assert got[("neo", "412", "en")][3] == "borderless"
    assert got[("lea", "46", "en")][4] == "1993"
    assert ("sld", "219", "en") not in got and ("altc", "18", "en") not in got and ("tmma", "16", "en") not in got
    with engine.connect() as conn:
        assert conn.execute(sa.select(Expansion.released_at).where(Expansion.code == "lea")).scalar_one().year == 1993


def test_importing_twice_adds_nothing(engine: sa.Engine) -> None:
    import_scryfall(engine, CARDS, sets_path=SETS)
    first = printings(engine)
    again = import_scryfall(engine, CARDS, sets_path=SETS)
    assert (again.printings_inserted, again.expansions_inserted) == (0, 0)
    assert printings(engine) == first


def test_faces_and_names_reach_the_candidate_index(sqlite_engine: sa.Engine) -> None:
    import_scryfall(sqlite_engine, CARDS, sets_path=SETS)
    with Session(sqlite_engine) as s:
        index = get_name_index(s)
    assert len(index.candidates_for("Insectile Aberration").candidates) == 1
    assert len(index.candidates_for("Kaiso, Memory of Loyalty").candidates) == 1
    assert len(index.candidates_for("Boseiju, Who Endures (1).png").candidates) == 5
    assert {c.set_code for c in index.candidates_for("Jotun Grunt").candidates} == {"csp"}
    assert "lea" in index.lexicon


def test_art_is_hashed_from_local_images(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    records = json.loads(CARDS.read_text())
    sid = next(r["id"] for r in records if r["set"] == "lea" and r["collector_number"] == "46")
    image = Image.new("RGB", (745, 1040), "black")
    for x in range(60, 680, 40):
        image.paste((x % 255, 90, 200 - x % 180), (x, 120, x + 20, 590))
    image.save(tmp_path / f"{sid}.png")
    (tmp_path / next(r["id"] for r in records if r["set"] == "lea" and r["collector_number"] == "98")).with_suffix(
        ".jpg").write_bytes(b"not an image")
    report = import_scryfall(sqlite_engine, CARDS, images_dir=tmp_path)
    assert (report.art_hashed, report.images_unreadable) == (1, 1)
    with sqlite_engine.connect() as conn:
        stored = conn.execute(sa.select(Printing.art_phash).where(Printing.scryfall_id == sid)).scalar_one()
    assert stored == art_phash(image)
    # A later import without images keeps the hash.
    import_scryfall(sqlite_engine, CARDS)
    with sqlite_engine.connect() as conn:
        assert conn.execute(sa.select(Printing.art_phash).where(Printing.scryfall_id == sid)).scalar_one() == stored


def test_broken_files_fail_with_a_named_error_and_keep_earlier_batches(
    sqlite_engine: sa.Engine, tmp_path: Path
) -> None:
    records = json.loads(CARDS.read_text())
    text = json.dumps(records[:60])
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) - 200])
    with pytest.raises(ScryfallImportError, match="not valid Scryfall JSON"):
        import_scryfall(sqlite_engine, cut, batch_size=10)
    with sqlite_engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(Printing)).scalar_one() >= 40
    garbage = tmp_path / "garbage.json"
    garbage.write_text("hello")
    with pytest.raises(ScryfallImportError):
        import_scryfall(sqlite_engine, garbage)
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps([{"object": "set", "code": "x"}, {"object": "card", "id": "1"}, records[1]]))
    report = import_scryfall(sqlite_engine, odd)
    assert dict(report.skipped) == {"not-a-card": 1, "missing-fields": 1}


def test_stream_never_loads_the_whole_file(sqlite_engine: sa.Engine, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(json, "load", lambda *a, **k: pytest.fail("json.load used"))
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads used"))
    assert import_scryfall(sqlite_engine, CARDS).printings_inserted == 98
