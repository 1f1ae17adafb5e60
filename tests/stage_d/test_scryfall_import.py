"""The Scryfall import against the real sample in tests/fixtures/scryfall (see its README)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import sqlalchemy as sa
from PIL import Image
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Expansion, Printing
from stage_e_dagster.catalog_import.scryfall import SKIP_EXAMPLES, ScryfallImportError, import_scryfall
from stage_e_dagster.cli.main import main
from stage_e_dagster.stage_c.hashing import art_phash
from stage_e_dagster.stage_d.name_index import get_name_index

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scryfall"
CARDS, SETS = FIXTURES / "cards.json", FIXTURES / "sets.json"
PROJECT = Path(__file__).resolve().parents[2]
# Sylvan Library from Renaissance in French: the sample's one non-English card.
FRENCH_ID = "81917a2b-9bf6-4aa6-947d-36b0f45d6fe3"


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
    assert report.shape == "array" and report.skip_examples == []  # layouts are policy, not bad records
    assert got[("isd", "51", "en")][:2] == ("Delver of Secrets // Insectile Aberration", "transform")
    assert got[("plc", "112", "en")][:2] == ("Boom // Bust", "split")
    assert got[("bok", "3", "en")][1] == "flip"
    assert got[("znr", "40", "en")][2] == "Johannes Voss"  # artist taken from the faces
    assert got[("neo", "412", "en")][3] == "borderless"
    assert got[("lea", "46", "en")][4] == "1993"
    assert ("sld", "219", "en") not in got and ("altc", "18", "en") not in got and ("tmma", "16", "en") not in got
    with engine.connect() as conn:
        assert conn.execute(sa.select(Expansion.released_at).where(Expansion.code == "lea")).scalar_one().year == 1993
        # Scryfall's card count is kept (the fixture holds a few cards of each set, so none is complete).
        counts = dict(conn.execute(sa.select(Expansion.code, Expansion.card_count)).all())
        assert (counts["lea"], counts["isd"], counts["neo"]) == (4, 5, 3)
        # And the total printed after the number, where the set prints one (Stage D confirms by it).
        sizes = dict(conn.execute(sa.select(Expansion.code, Expansion.printed_size)).all())
        assert (sizes["isd"], sizes["neo"], sizes["lea"]) == (264, 302, None)


def test_progress_reports_records_read_and_the_share_of_the_file_for_a_time_left(engine: sa.Engine) -> None:
    calls: list[tuple[int, float]] = []
    report = import_scryfall(engine, CARDS, sets_path=SETS, batch_size=30, progress=lambda n, f: calls.append((n, f)))
    assert len(calls) >= 2 and calls[-1] == (report.records_read, 1.0)
    records, shares = [n for n, _ in calls], [f for _, f in calls]
    assert records == sorted(records) and shares == sorted(shares)
    assert 0 < shares[0] < 1  # a batch in: part of the file read


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
    assert report.skip_examples == ["record 1: object 'set'",
                                    "record 2: id 1: missing set, collector_number, name"]


def test_stream_never_loads_the_whole_file(sqlite_engine: sa.Engine, tmp_path: Path, monkeypatch) -> None:
    lines = write_json_lines(tmp_path / "cards.jsonl", records())
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"object": "list", "has_more": False, "data": records()}))
    monkeypatch.setattr(json, "load", lambda *a, **k: pytest.fail("json.load used"))
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads used"))
    assert import_scryfall(sqlite_engine, CARDS).printings_inserted == 98
    assert import_scryfall(sqlite_engine, lines).printings_updated == 98
    assert import_scryfall(sqlite_engine, listed).printings_updated == 98



def records() -> list[dict]:
    return json.loads(CARDS.read_text(encoding="utf-8"))


def write_json_lines(path: Path, rows: list[dict], newline: str = "\n", blank_every: int = 0) -> Path:
    lines = []
    for i, row in enumerate(rows, 1):
        lines.append(json.dumps(row, ensure_ascii=False))
        if blank_every and i % blank_every == 0:
            lines.append("   ")
    path.write_bytes((newline.join(lines) + newline).encode("utf-8"))
    return path


def as_list_object(path: Path) -> Path:
    path.write_text(json.dumps({"object": "list", "total_cards": 103, "has_more": False, "data": records()}))
    return path


def with_bom(path: Path) -> Path:
    path.write_bytes(b"\xef\xbb\xbf" + CARDS.read_bytes())
    return path


def json_lines_with_bom_crlf(path: Path) -> Path:
    write_json_lines(path, records(), newline="\r\n", blank_every=10)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    return path


SHAPES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "array": (lambda p: CARDS, "array"),
    "json-lines": (lambda p: write_json_lines(p, records()), "JSON Lines"),
    "json-lines-crlf-blank-lines": (lambda p: write_json_lines(p, records(), "\r\n", blank_every=7), "JSON Lines"),
    "list-object": (as_list_object, "list object"),
    "array-with-bom": (with_bom, "array"),
    "json-lines-bom-crlf": (json_lines_with_bom_crlf, "JSON Lines"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_accepted_shape_imports_the_same_printings(sqlite_engine: sa.Engine, tmp_path: Path,
                                                         shape: str) -> None:
    make, expected_shape = SHAPES[shape]
    report = import_scryfall(sqlite_engine, make(tmp_path / "cards.data"), batch_size=40)
    assert (report.shape, report.records_read, report.printings_inserted) == (expected_shape, 103, 98)
    assert sum(report.skipped.values()) == 5
    got = printings(sqlite_engine)
    assert len(got) == 98 and got[("ren", "158", "fr")][0] == "Sylvan Library"


def test_a_single_card_object_is_one_printing(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_text(json.dumps(next(r for r in records() if r["id"] == FRENCH_ID), indent=2, ensure_ascii=False))
    report = import_scryfall(sqlite_engine, one)
    assert (report.shape, report.records_read, report.printings_inserted) == ("single object", 1, 1)
    assert list(printings(sqlite_engine)) == [("ren", "158", "fr")]


def test_the_french_card_keeps_its_printed_name_and_is_found_by_it(engine: sa.Engine) -> None:
    import_scryfall(engine, CARDS, sets_path=SETS)
    with engine.connect() as conn:
        row = conn.execute(sa.select(Printing.id, Printing.name, Printing.printed_name, Printing.lang)
                           .where(Printing.scryfall_id == FRENCH_ID)).one()
        delver = conn.execute(sa.select(Printing.face_names, Printing.printed_face_names)
                              .where(Printing.name == "Delver of Secrets // Insectile Aberration")).one()
        english = conn.execute(sa.select(sa.func.count()).select_from(Printing)
                               .where(Printing.printed_name.is_not(None))).scalar_one()
    assert tuple(row[1:]) == ("Sylvan Library", "Bibliothèque sylvestre", "fr")
    assert tuple(delver) == (["Delver of Secrets", "Insectile Aberration"], None)
    assert english == 1  # the sample's English cards carry no printed name of their own
    with Session(engine) as s:
        index = get_name_index(s)
    for upload in ("Bibliothèque sylvestre", "BIBLIOTHEQUE SYLVESTRE", "bibliotheque-sylvestre (1).jpg"):
        found = index.candidates_for(upload)
        assert [c.id for c in found.candidates] == [row[0]], upload
        assert found.printed_langs == {"fr"}
    assert [c.id for c in index.candidates_for("Sylvan Library").candidates] == [row[0]]


def test_printed_face_names_find_a_double_faced_printing(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    """A German printing made from the sample's Delver record (the German face names are made up for the test)."""
    delver = next(r for r in records() if r["name"] == "Delver of Secrets // Insectile Aberration")
    german = dict(delver, id="00000000-0000-4000-8000-00000000de51", lang="de", card_faces=[
        dict(delver["card_faces"][0], printed_name="Pirscher der Geheimnisse"),
        dict(delver["card_faces"][1], printed_name="Insektenhafte Monstrosität"),
    ])
    lines = write_json_lines(tmp_path / "delver.jsonl", [delver, german])
    assert import_scryfall(sqlite_engine, lines).printings_inserted == 2
    with sqlite_engine.connect() as conn:
        stored = conn.execute(sa.select(Printing.id, Printing.printed_name, Printing.printed_face_names)
                              .where(Printing.lang == "de")).one()
    assert stored[1] == "Pirscher der Geheimnisse // Insektenhafte Monstrosität"
    assert stored[2] == ["Pirscher der Geheimnisse", "Insektenhafte Monstrosität"]
    with Session(sqlite_engine) as s:
        index = get_name_index(s)
    # Same set and number in German and English: the German name keeps only the German printing.
    assert [c.id for c in index.candidates_for("Insektenhafte Monstrositat").candidates] == [stored[0]]
    assert len(index.candidates_for("Insectile Aberration").candidates) == 2


def test_bad_records_in_a_good_file_are_skipped_counted_and_described(sqlite_engine: sa.Engine,
                                                                      tmp_path: Path) -> None:
    good = records()[:10]
    bad = [
        {"object": "set", "code": "lea"},
        {"object": "card", "id": "x-1", "set": "lea", "name": "Nameless Number"},
        {"object": "card", "id": "x-2", "set": "lea", "collector_number": "1", "name": ["a", "list"]},
        {"object": "card", "id": "x-3", "set": "lea", "collector_number": "2", "name": "Faces", "card_faces": "no"},
        ["not", "an", "object"],
        {"object": "card", "id": "x-4", "set": "lea", "collector_number": "3", "name": "Odd", "lang": 7},
        {"name": "Lightning Bolt", "set": "m10", "collector_number": "146"},
    ]
    path = write_json_lines(tmp_path / "mixed.jsonl", good[:5] + bad + good[5:])
    report = import_scryfall(sqlite_engine, path)
    assert report.records_read == 17
    assert dict(report.skipped) == {"not-a-card": 3, "missing-fields": 1, "bad-fields": 3, "layout-art_series": 1}
    assert report.printings_inserted == 9
    assert len(report.skip_examples) == SKIP_EXAMPLES
    assert report.skip_examples[:3] == [
        "record 6: object 'set'",
        "record 7: id x-1: missing collector_number",
        "record 8: id x-2: name not of Scryfall's type",
    ]


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``stage-e`` through its real entry point, in process: exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["stage-e", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def cli_db(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STAGE_E_DATABASE_URL", sqlite_url)
    return sqlite_url


def _tokens_only() -> bytes:
    return json.dumps([r for r in records() if r["layout"] == "token"]).encode()


REFUSALS: dict[str, tuple[Callable[[], bytes], str]] = {
    "empty-object": (lambda: b"{}", 'no card records (found 1 x object without "object" (keys: none))'),
    "empty-array": (lambda: b"[]\n", "no card records (found no records)"),
    "empty-list-object": (lambda: b'{"object": "list", "data": []}', "no card records (found no records)"),
    "a-set-list": (SETS.read_bytes, "no card records (found 50 x object 'set')"),
    "object-without-object-card": (
        lambda: b'{"name": "Lightning Bolt", "set": "m10", "collector_number": "146"}',
        'no card records (found 1 x object without "object" (keys: collector_number, name, set))'),
    "scryfall-error-object": (
        lambda: b'{"object": "error", "code": "not_found", "status": 404}',
        "no card records (found 1 x object 'error')"),
    "csv": (lambda: b"\xef\xbb\xbfname,set,collector_number\nLightning Bolt,m10,146\n",
            "not a JSON array or object: it starts with 'name,set,collector_number'"),
    "a-number": (lambda: b"42", "not a JSON array or object: it starts with '42'"),
    "empty-file": (lambda: b"", "the file is empty"),
    "blank-file": (lambda: b"\xef\xbb\xbf \r\n\n", "the file holds only whitespace"),
    "gzip": (lambda: gzip.compress(CARDS.read_bytes()[:2000]), "gzip-compressed"),
    "tokens-only": (_tokens_only, "no importable card among 2 card records (skipped: layout-token 2)"),
    "broken-first-record": (lambda: b'{"object": "card", "id": ', "not valid Scryfall JSON in its first record"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_file_that_is_not_card_data_is_one_line_and_exit_1(
    cli_db: str, sqlite_engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], case: str,
) -> None:
    content, message = REFUSALS[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(content())
    code, out, err = run_cli(monkeypatch, capsys, "catalog", "import-scryfall", str(path))
    assert (code, out) == (1, "")
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"stage-e: error: {path}: "), err
    assert message in err
    assert printings(sqlite_engine) == {}


def test_a_file_that_breaks_off_keeps_what_was_read(
    cli_db: str, sqlite_engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = write_json_lines(tmp_path / "cut.jsonl", records()[:12])
    lines.write_bytes(lines.read_bytes()[:-300])  # the download broke off inside record 12
    code, out, err = run_cli(monkeypatch, capsys, "catalog", "import-scryfall", str(lines))
    assert code == 1 and err.count("\n") == 1
    assert f"{lines}: not valid Scryfall JSON after 11 records" in err
    kept = sum(1 for r in records()[:11] if r["layout"] not in {"token", "double_faced_token", "emblem", "art_series"})
    assert len(printings(sqlite_engine)) == kept


def test_a_cards_file_given_as_sets_is_refused_before_anything_is_written(
    cli_db: str, sqlite_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "catalog", "import-scryfall", str(CARDS), "--sets", str(CARDS))
    assert code == 1 and err.count("\n") == 1
    assert f"{CARDS}: no set records (found 103 x card)" in err
    with sqlite_engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(Expansion)).scalar_one() == 0


def test_the_summary_names_the_shape_and_the_skipped_records(
    cli_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_json_lines(tmp_path / "cards.jsonl", [{"object": "set", "code": "lea"}, *records()])
    code, out, err = run_cli(monkeypatch, capsys, "catalog", "import-scryfall", str(path))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "read 104 records (JSON Lines): 98 printings added, 0 updated, 46 expansions added, 0 art hashes; "
        "skipped: layout-art_series 1, layout-double_faced_token 1, layout-emblem 1, layout-token 2, not-a-card 1",
        "  skipped record 1: object 'set'",
    ]
    code, out, _ = run_cli(monkeypatch, capsys, "catalog", "import-scryfall", str(path), "--json")
    summary = json.loads(out)
    assert (code, summary["shape"], summary["printings_updated"]) == (0, "JSON Lines", 98)
    assert summary["skip_examples"] == ["record 1: object 'set'"]


@pytest.mark.slow
def test_the_installed_command_refuses_an_empty_object(sqlite_url: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    done = subprocess.run(
        [str(PROJECT / ".venv" / "bin" / "stage-e"), "catalog", "import-scryfall", str(empty)],
        capture_output=True, text=True, env={"STAGE_E_DATABASE_URL": sqlite_url, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f'stage-e: error: {empty}: not Scryfall card data: no card records '
        f'(found 1 x object without "object" (keys: none))'
    ]
