"""The real Stage C then Stage D on the eight real card photos: zero wrong machine votes.

The photos live outside the project (``../shared/fixtures/real-photos``, evaluation input only)
and the test skips when they are absent. The scratch catalogue comes from ``labels.csv``
(``evaluation/photos.py``: each true printing with decoys beside it, so a careless vote has
somewhere wrong to go), with the release dates Scryfall gives. The figures are printed
(``pytest -s``); the safety of votes is asserted, and that the readings the stages got right on
these photos stay right.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path

import pytest

from stage_e_dagster.evaluation.labels import LabelFileError
from stage_e_dagster.evaluation.photos import (
    LABELS_FILE,
    evaluate_photo_folder,
    evaluate_photos,
    load_photo_labels,
    photo_totals,
)

PHOTOS = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real-photos"

needs_photos = pytest.mark.skipif(
    not (PHOTOS / LABELS_FILE).is_file(),
    reason=f"real photos not present at {PHOTOS} (evaluation input kept outside the project)",
)

# What labels.csv does not say: each set's release date (Scryfall's).
RELEASED = {
    "3ed": date(1994, 4, 11), "4ed": date(1995, 4, 1), "avr": date(2012, 5, 4), "bfz": date(2015, 10, 2),
    "ddu": date(2018, 4, 6), "frf": date(2015, 1, 23), "ima": date(2017, 3, 17), "pca": date(2017, 6, 2),
}


@needs_photos
def test_real_photos_cast_no_wrong_vote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = [dataclasses.replace(lb, released=RELEASED[lb.set_code])
              for lb in load_photo_labels(PHOTOS / LABELS_FILE)]
    results = evaluate_photos(PHOTOS, labels, workdir=tmp_path)
    totals = photo_totals(results)
    with capsys.disabled():
        print(f"\nreal photos: {totals}")
        for r in results:
            print(f"  {r.label.file}: read {r.read_set}/{r.read_number}, join key {r.outcome}, "
                  f"fallback {r.fallback} {r.still_fit}, votes {r.votes} on {r.readings}")
    assert totals["photos"] == len(labels) == 8
    assert totals["wrong_votes"] == 0
    # What the stages read right before issue 20 (five 2015-frame cards) must stay right.
    assert totals["collector_number_right"] >= 5 and totals["set_code_right"] >= 5
    assert totals["cards_voted"] >= 5
    # Issue 41: the old frames are placed by what they print. Fourth Edition's "(c) 1995" line places its
    # Plague Rats among the name's real printings; Revised prints no year, so it is placed or abstains
    # naming the printings that still fit, its own among them.
    by_file = {r.label.file: r for r in results}
    assert by_file["4ed-154.jpg"].votes == ["4ed/154"]
    revised = by_file["3ed-123.jpg"]
    assert revised.votes == ["3ed/123"] or (not revised.votes and "3ed/123" in revised.still_fit)


def test_a_labels_csv_without_the_required_columns_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / LABELS_FILE).write_text("file,set\na.jpg,bfz\n", encoding="utf-8")
    with pytest.raises(LabelFileError, match="missing column"):
        evaluate_photo_folder(tmp_path)


def test_a_labelled_photo_missing_from_the_folder_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / LABELS_FILE).write_text("file,set,collector_number,lang,name\nabsent.jpg,bfz,171,en,Wurm\n",
                                        encoding="utf-8")
    with pytest.raises(LabelFileError, match="absent.jpg"):
        evaluate_photo_folder(tmp_path)


def test_a_set_symbols_folder_without_icons_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / LABELS_FILE).write_text("file,set,collector_number,lang,name\ncard.jpg,vis,80,en,Goblin Recruiter\n",
                                        encoding="utf-8")
    (tmp_path / "card.jpg").write_bytes(b"not read: the folder of icons is refused first")
    empty = tmp_path / "icons"
    empty.mkdir()
    with pytest.raises(LabelFileError, match="no set symbols"):
        evaluate_photo_folder(tmp_path, set_symbols=empty)
