"""``stage-e seed``, ``bulk --stage c`` and ``evaluate`` through Typer's CliRunner."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from PIL import Image
from typer.testing import CliRunner

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, CardClaim, ImageEvidence
from stage_e_dagster.cli.context import catalog_engine
from stage_e_dagster.cli.main import app
from stage_e_dagster.corpus.catalogue import PrintingSpec
from stage_e_dagster.corpus.photo import CONDITIONS
from stage_e_dagster.corpus.render import Variant, render_face

runner = CliRunner()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STAGE_E_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("STAGE_E_IMAGE_ROOTS", str(tmp_path / "corpus"))
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    return tmp_path


def test_seed_bulk_evaluate(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_OCR_PASS", "full")  # the readings are what this test checks
    seeded = runner.invoke(app, ["seed", "--cards", "8", "--out", str(env / "corpus"), "--seed", "1", "--json"])
    assert seeded.exit_code == 0, seeded.output
    summary = json.loads(seeded.output)
    assert summary["cards"] == 8 and summary["image_roots_include_out"] is True

    ids_file = env / "ids.txt"
    ids_file.write_text("1, 2  # first two\n3\n")
    some = runner.invoke(app, ["bulk", "--stage", "c", "--card-ids", str(ids_file), "--json"])
    assert some.exit_code == 0, some.output
    assert json.loads(some.output)["attempted"] == 3

    rest = runner.invoke(app, ["bulk", "--stage", "c", "--limit", "100", "--json"])
    report = json.loads(rest.output)
    assert report["attempted"] == 5 and report["writer"].startswith("bulk:")

    evaluated = runner.invoke(app, ["evaluate", str(env / "corpus" / "labels.jsonl"), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    figures = json.loads(evaluated.output)
    assert figures["cards_labelled"] == 8 and figures["cards_with_evidence"] == 8
    assert figures["collector_number_total"] > 0
    assert figures["collector_number_correct"] == figures["collector_number_total"]
    assert figures["set_code_accuracy"] == 1.0 and figures["bleed_accuracy"] == 1.0

    table = runner.invoke(app, ["evaluate", str(env / "corpus" / "labels.jsonl")])
    assert "collector_number_accuracy" in table.output


def test_seed_photo_like_then_evaluate_by_condition(env: Path) -> None:
    cards = len(CONDITIONS)
    seeded = runner.invoke(app, ["seed", "--photo-like", "--cards", str(cards), "--out", str(env / "corpus"), "--json"])
    assert seeded.exit_code == 0, seeded.output
    assert json.loads(seeded.output)["cards"] == cards
    labels = env / "corpus" / "labels.jsonl"
    assert [json.loads(line)["condition"] for line in labels.read_text().splitlines()] == list(CONDITIONS)
    assert runner.invoke(app, ["bulk", "--stage", "all", "--json"]).exit_code == 0

    out = runner.invoke(app, ["evaluate", str(labels), "--by", "condition", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["condition"]: r for r in json.loads(out.output)}
    assert list(rows) == [*CONDITIONS, "total"]
    assert rows["total"]["cards"] == cards and rows["format-old"]["number_printed"] == 0
    assert rows["format-pre2015"]["set_printed"] == 0  # a 2008-2014 frame prints no set code
    assert rows["baseline"]["number_right"] == 1 and rows["baseline"]["votes"] == 1
    table = runner.invoke(app, ["evaluate", str(labels), "--by", "condition"])
    assert "phone-photo" in table.output and "wrong votes" in table.output
    refused = runner.invoke(app, ["evaluate", str(labels), "--by", "nope"])
    assert "no label in" in str(refused.exception) and "'nope'" in str(refused.exception)


def test_user_errors_are_one_line(env: Path) -> None:
    assert "unknown --stage 'x'" in str(runner.invoke(app, ["bulk", "--stage", "x"]).exception)
    workers = runner.invoke(app, ["bulk", "--stage", "d", "--workers", "2"])
    assert "--workers applies to Stage C only" in str(workers.exception)
    bad = env / "bad.txt"
    bad.write_text("12 abc\n")
    result = runner.invoke(app, ["bulk", "--card-ids", str(bad)])
    assert "bad.txt:1: 'abc' is not a card id" in str(result.exception)
    labels = env / "labels.jsonl"
    labels.write_text('{"name": "no identifier"}\n')
    refused = runner.invoke(app, ["evaluate", str(labels)])
    assert "expected an object with a string 'identifier'" in str(refused.exception)
    assert "--cards must be at least 1" in str(runner.invoke(app, ["seed", "--cards", "0"]).exception)


def test_seed_refuses_a_folder_stage_c_could_not_read(env: Path) -> None:
    outside = env / "elsewhere"
    result = runner.invoke(app, ["seed", "--cards", "2", "--out", str(outside)])
    assert result.exit_code != 0
    message = str(result.exception)
    assert "STAGE_E_IMAGE_ROOTS" in message and str(outside) in message and "\n" not in message
    assert not outside.exists()
    status = json.loads(runner.invoke(app, ["status", "--json"]).output)
    assert status["stage_c_backlog"] == 0  # nothing was seeded


def test_seed_by_default_writes_where_stage_c_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STATE_DIR", str(tmp_path / "state"))  # image roots: the default, <state>/images
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    seeded = runner.invoke(app, ["seed", "--cards", "3", "--seed", "1", "--json"])
    assert seeded.exit_code == 0, seeded.output
    images = Path(json.loads(seeded.output)["images_dir"])
    assert images.is_relative_to(tmp_path / "state" / "images")
    bulk = runner.invoke(app, ["bulk", "--stage", "c", "--json"])
    report = json.loads(bulk.output)
    assert report["attempted"] == 3 and report["config_refused"] == 0 and report["completed"] == 3


def test_evaluate_a_folder_of_photos_with_a_labels_csv(tmp_path: Path) -> None:
    """``stage-e evaluate FOLDER``: the stages on the photos in a scratch catalogue built from
    ``labels.csv``; per-photo rows and totals (issue 20, item 7). Rendered cards stand in for photos."""
    folder = tmp_path / "photos"
    folder.mkdir()
    rows = ["file,set,collector_number,printed_collector_text,lang,name,artist,border_color"]
    for code, number, size, name in (("dmu", "41", 281, "Broodhunter Wurm"), ("fdn", "100", 271, "Krosan Tusker")):
        spec = PrintingSpec(key=code, set_code=code.upper(), name=name, collector_number=number, lang="en",
                            rarity="C", artist="Ann Artist", border_color="black", frame="2015", style="slash",
                            released=date(2022, 9, 9), set_size=size, art_seed=4)
        render_face(spec, Variant(height=1000)).save(folder / f"{code}.png")
        rows.append(f"{code}.png,{code},{number},{int(number):03d}/{size} C / {code.upper()} \u2022 EN,en,{name},"
                    "Ann Artist,black")
    (folder / "labels.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")

    out = runner.invoke(app, ["evaluate", str(folder), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    expected = {"photos": 2, "collector_number_right": 2, "collector_number_printed": 2, "set_code_right": 2,
                "set_code_printed": 2, "votes": 2, "wrong_votes": 0, "cards_voted": 2, "multi_card_photos": 0}
    assert {key: report["totals"][key] for key in expected} == expected
    assert [(p["file"], p["join_key"], p["votes"]) for p in report["photos"]] == [
        ("dmu.png", "vote", ["dmu/41"]), ("fdn.png", "vote", ["fdn/100"])]
    table = runner.invoke(app, ["evaluate", str(folder)])
    assert "collector_number_right" in table.output and "dmu.png" in table.output
    (folder / "labels.csv").write_text("file,set\n", encoding="utf-8")
    refused = runner.invoke(app, ["evaluate", str(folder)])
    assert "missing column(s) collector_number, lang, name" in str(refused.exception)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_bulk_beside_streaming_skips_cards_a_live_batch_holds(env: Path, workers: str) -> None:
    seeded = runner.invoke(app, ["seed", "--cards", "3", "--out", str(env / "corpus"), "--seed", "1", "--json"])
    assert seeded.exit_code == 0, seeded.output
    engine = catalog_engine()
    with session_scope(engine) as session:
        held = session.execute(sa.select(Card.id).order_by(Card.id).limit(1)).scalar_one()
        session.add(CardClaim(card_id=held, batch_key="mb-live", expires_at=utcnow() + timedelta(minutes=10)))
    result = runner.invoke(app, ["bulk", "--stage", "c", "--workers", workers, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["attempted"] == 2
    assert report["claimed_elsewhere"] == 1
    with session_scope(engine) as session:
        card = session.get(Card, held)
        assert card.stage_c_pending and card.content_hash is None
        assert session.execute(sa.select(sa.func.count()).select_from(ImageEvidence)
                               .where(ImageEvidence.card_id == held)).scalar_one() == 0


def test_bulk_tries_cards_waiting_on_configuration_again_once_the_settings_change(
        env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeded = runner.invoke(app, ["seed", "--cards", "2", "--out", str(env / "corpus"), "--seed", "1", "--json"])
    assert seeded.exit_code == 0, seeded.output
    monkeypatch.setenv("STAGE_E_IMAGE_ROOTS", str(env / "elsewhere"))
    refused = json.loads(runner.invoke(app, ["bulk", "--stage", "c", "--json"]).output)
    assert (refused["attempted"], refused["config_refused"], refused["completed"]) == (2, 2, 0)
    again = json.loads(runner.invoke(app, ["bulk", "--stage", "c", "--json"]).output)
    assert again["attempted"] == 0  # the same settings: not tried again
    monkeypatch.setenv("STAGE_E_IMAGE_ROOTS", str(env / "corpus"))
    fixed = json.loads(runner.invoke(app, ["bulk", "--stage", "c", "--json"]).output)
    assert (fixed["attempted"], fixed["completed"], fixed["config_refused"]) == (2, 2, 0)


def test_evaluate_takes_several_photos_of_one_printing_a_photo_of_several_cards_and_a_render(
        tmp_path: Path) -> None:
    """Issue 30, item 7: labels as real collections have them. Two photos of one printing, a photo of
    two cards (one labels row per card) and a flagged render are all valid input: the evaluation runs
    to the end (it stopped with an IntegrityError), scores the photo of several cards as an abstention
    with its reason, and casts no wrong vote."""
    folder = tmp_path / "photos"
    folder.mkdir()
    header = "file,set,collector_number,printed_collector_text,lang,name,artist,border_color,orientation"
    rows = [header]
    faces = {}
    for code, number, size, name in (("dmu", "41", 281, "Broodhunter Wurm"), ("dmu", "42", 281, "Krosan Tusker")):
        spec = PrintingSpec(key=code + number, set_code=code.upper(), name=name, collector_number=number, lang="en",
                            rarity="C", artist="Ann Artist", border_color="black", frame="2015", style="slash",
                            released=date(2022, 9, 9), set_size=size, art_seed=int(number))
        faces[number] = render_face(spec, Variant(height=900))
    line = "{n:03d}/281 C / DMU \u2022 EN,en,{name},Ann Artist,black,{orientation}"
    for file, orientation in (("wurm-a.png", "upright"), ("wurm-b.png", "upright, closer"),
                              ("render_wurm.png", "RENDER: flat digital card image")):
        faces["41"].save(folder / file)
        rows.append(f"{file},dmu,41," + line.format(n=41, name="Broodhunter Wurm", orientation=orientation))
    pair = Image.new("RGB", (faces["41"].width * 2 + 60, faces["41"].height + 40), (240, 240, 235))
    pair.paste(faces["41"], (20, 20))
    pair.paste(faces["42"], (faces["41"].width + 40, 20))
    pair.save(folder / "multi_two.png")
    for number, name in (("41", "Broodhunter Wurm"), ("42", "Krosan Tusker")):
        rows.append(f"multi_two.png,dmu,{number}," + line.format(n=int(number), name=name, orientation="MULTI 2 cards"))
    (folder / "labels.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")

    out = runner.invoke(app, ["evaluate", str(folder), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    totals = report["totals"]
    assert totals["photos"] == 4 and totals["labelled_cards"] == 5 and totals["wrong_votes"] == 0
    assert totals["multi_card_photos"] == 1 and totals["multi_card_photos_abstained"] == 1
    by_file = {(p["file"], p["collector_number"]): p for p in report["photos"]}
    for file in ("wurm-a.png", "wurm-b.png", "render_wurm.png"):
        assert by_file[(file, "41")]["votes"] == ["dmu/41"], by_file[(file, "41")]
    assert by_file[("render_wurm.png", "41")]["render"]
    for number in ("41", "42"):
        several = by_file[("multi_two.png", number)]
        assert several["several_cards"] and several["votes"] == [] and several["join_key"] == "several-cards"
