"""``stage-e vote`` and ``stage-e catalog import-scryfall`` through Typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from stage_e_dagster.cli.errors import CliError
from stage_e_dagster.cli.main import app
from stage_e_dagster.stage_d.run import run_stage_d

from .builders import CatalogueBuilder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scryfall"


@pytest.fixture
def cli_env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STAGE_E_DATABASE_URL", sqlite_url)
    return sqlite_url


def test_vote_resolves_and_reports(cli_env: str, sqlite_engine: sa.Engine) -> None:
    b = CatalogueBuilder(sqlite_engine)
    dmu = b.printing("Tithe Taker", "dmu", "41")
    card = b.card("Tithe Taker", identifier="drive-abc", evidence=dict(collector_set_code="dmu", collector_number="41"))
    run_stage_d(sqlite_engine, None, run_id="r")
    runner = CliRunner()
    out = runner.invoke(app, ["vote", "drive-abc", "dmu:041", "--user", "ann", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["status"] == "unresolved"
    out = runner.invoke(app, ["vote", str(card), str(dmu), "--user", "bob"])
    assert out.exit_code == 0, out.output
    assert f"resolved to printing {dmu}" in out.output
    out = runner.invoke(app, ["vote", "drive-abc", "--no-match", "--user", "root", "--admin", "--json"])
    assert json.loads(out.output)["status"] == "no_match"


@pytest.mark.parametrize("args, message", [
    (["vote", "nope", "dmu:41", "--user", "ann"], "no card"),
    (["vote", "drive-abc", "dmu:999", "--user", "ann"], "no printing"),
    (["vote", "drive-abc", "12345", "--user", "ann"], "no printing"),
    (["vote", "drive-abc", "dmu:41", "--no-match", "--user", "ann"], "exactly one"),
    (["vote", "drive-abc", "dmu:41"], "--user"),
    (["vote", "drive-abc", "dmu:41", "--user", "stage-d-join-key-v1"], "not a usable voter"),
])
def test_vote_errors_are_one_line(cli_env: str, sqlite_engine: sa.Engine, args: list[str], message: str) -> None:
    b = CatalogueBuilder(sqlite_engine)
    b.printing("Tithe Taker", "dmu", "41")
    b.card("Tithe Taker", identifier="drive-abc")
    out = CliRunner().invoke(app, args)
    assert isinstance(out.exception, CliError)
    assert message in str(out.exception)


def test_import_scryfall_command(cli_env: str, tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["catalog", "import-scryfall", str(FIXTURES / "cards.json"), "--sets", str(FIXTURES / "sets.json"), "--json"]
    first = json.loads(runner.invoke(app, args).output)
    second = json.loads(runner.invoke(app, args).output)
    assert (first["printings_inserted"], second["printings_inserted"]) == (98, 0)
    out = runner.invoke(app, ["catalog", "import-scryfall", str(tmp_path / "missing.json")])
    assert isinstance(out.exception, CliError) and "not a readable file" in str(out.exception)
    bad = tmp_path / "bad.json"
    bad.write_text("[{\"object\": \"card\", ")
    out = runner.invoke(app, ["catalog", "import-scryfall", str(bad)])
    assert isinstance(out.exception, CliError) and "not valid Scryfall JSON" in str(out.exception)


def test_bulk_stage_d_and_evaluate(cli_env: str, sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    b = CatalogueBuilder(sqlite_engine)
    b.printing("Tithe Taker", "dmu", "41")
    b.printing("Tithe Taker", "fdn", "41")
    b.card("Tithe Taker", identifier="right", evidence=dict(collector_set_code="dmu", collector_number="41"))
    b.card("Tithe Taker", identifier="wrong", evidence=dict(collector_set_code="fdn", collector_number="41"))
    b.card("Tithe Taker", identifier="unread", evidence=dict(collector_set_code=None, collector_number=None))
    runner = CliRunner()
    out = runner.invoke(app, ["bulk", "--stage", "d", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output.strip().splitlines()[-1])
    assert (result["stage"], result["cards_considered"], result["join_key_votes"]) == ("d", 3, 2)
    again = json.loads(runner.invoke(app, ["bulk", "--stage", "d", "--json"]).output.strip().splitlines()[-1])
    assert again["join_key_votes"] == 0

    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(json.dumps(row) for row in [
        {"identifier": "right", "set_code": "dmu", "collector_number": "041"},
        {"identifier": "wrong", "set_code": "dmu", "collector_number": "41"},   # the engine read fdn
        {"identifier": "unread", "set_code": "dmu", "collector_number": "41"},
    ]) + "\n")
    out = runner.invoke(app, ["evaluate", str(labels), "--json"])
    assert out.exit_code == 0, out.output
    figures = json.loads(out.output)
    assert (figures["machine_votes"], figures["vote_precision"], figures["coverage"]) == (2, 0.5, 0.6667)
    assert figures["wrong_resolutions"] == 0
