"""The real Stage C then Stage D on the eight real card photos: zero wrong machine votes.

The photos live outside the project (``../shared/fixtures/real-photos``, evaluation input only)
and the test skips when they are absent. The catalogue records come from ``labels.csv``, with
decoys beside each true printing (its The List reprint, the same name under the same number in
another set, a neighbour in the same set) so that a careless vote has somewhere wrong to go. The
coverage figures are printed (``pytest -s``) for the record; only the safety of votes is asserted.
"""

from __future__ import annotations

import csv
from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Card, PrintingVote
from stage_e_dagster.evaluation.stage_d import evaluate_stage_d
from stage_e_dagster.stage_c.current import present_evidence
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.run import run_stage_c
from stage_e_dagster.stage_d.names import normalize_collector_number
from stage_e_dagster.stage_d.run import run_stage_d

from .builders import CatalogueBuilder

PHOTOS = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real-photos"

pytestmark = pytest.mark.skipif(
    not (PHOTOS / "labels.csv").is_file(),
    reason=f"real photos not present at {PHOTOS} (evaluation input kept outside the project)",
)

# What labels.csv does not say: each set's release date and the frame its cards use (Scryfall's).
SETS = {
    "3ed": (date(1994, 4, 11), "1993"), "4ed": (date(1995, 4, 1), "1993"), "avr": (date(2012, 5, 4), "2003"),
    "bfz": (date(2015, 10, 2), "2015"), "ddu": (date(2018, 4, 6), "2015"), "frf": (date(2015, 1, 23), "2015"),
    "ima": (date(2017, 3, 17), "2015"), "pca": (date(2017, 6, 2), "2015"),
}
DECOY_SET = "ema"      # the same name under the same number in another set
LIST_SET = "plst"      # The List, where Scryfall files these reprints as "AVR-68"


def load_labels() -> list[dict[str, str]]:
    with open(PHOTOS / "labels.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def build_catalogue(engine: sa.Engine, labels: list[dict[str, str]]) -> dict[str, int]:
    """True printings for the photos plus decoys; returns file name -> true printing id."""
    b = CatalogueBuilder(engine)
    for code, (released, _) in SETS.items():
        b.expansion(code, released)
    b.expansion(DECOY_SET, date(2016, 6, 10))
    b.expansion(LIST_SET, date(2020, 9, 25))
    truth: dict[str, int] = {}
    for row in labels:
        code, number, name = row["set"], row["collector_number"], row["name"]
        released, frame = SETS[code]
        truth[row["file"]] = b.printing(name, code, number, artist=row["artist"], border=row["border_color"],
                                        frame=frame, released=released)
        b.printing(name, LIST_SET, f"{code.upper()}-{number}", artist=row["artist"], border="black", frame="2015")
        if code not in ("3ed", "4ed"):  # the two Plague Rats already decoy each other
            b.printing(name, DECOY_SET, number, artist=row["artist"], border="black", frame="2015")
        b.printing(f"Neighbour of {name}", code, str(int(number) + 1), frame=frame, released=released)
    return truth


def test_real_photos_cast_no_wrong_vote(sqlite_engine: sa.Engine, capsys: pytest.CaptureFixture[str]) -> None:
    engine = sqlite_engine
    labels = load_labels()
    truth = build_catalogue(engine, labels)
    with engine.begin() as conn:
        ids = {
            row["file"]: int(conn.execute(sa.insert(Card).values(
                identifier=row["file"], name=row["name"], image_locator=(PHOTOS / row["file"]).as_uri(),
            ).returning(Card.id)).scalar_one())
            for row in labels
        }
    with ImageFetcher(engine=engine, image_roots=[PHOTOS], allowed_hosts=[], timeout_s=5.0,
                      max_bytes=20_000_000, rate_per_sec=1000.0) as fetcher:
        report = run_stage_c(engine, sorted(ids.values()), writer="test:real-photos", run_id="real-photos",
                             fetcher=fetcher)
    assert report.completed == len(labels), report
    run_stage_d(engine, sorted(ids.values()), run_id="real-photos")

    with Session(engine) as session:
        evidence = present_evidence(session, ids.values())
        votes = session.execute(sa.select(PrintingVote.card_id, PrintingVote.printing_id, PrintingVote.is_no_match)
                                .where(PrintingVote.source == "ocr")).all()
    by_card = {cid: name for name, cid in ids.items()}
    read = {row["file"]: evidence.get(ids[row["file"]]) for row in labels}
    number_right = sum(ev is not None and normalize_collector_number(ev.collector_number)
                       == normalize_collector_number(row["collector_number"])
                       for row in labels for ev in [read[row["file"]]])
    set_right = sum(ev is not None and (ev.collector_set_code or "") == row["set"]
                    for row in labels for ev in [read[row["file"]]])
    wrong = [(by_card[cid], pid, no_match) for cid, pid, no_match in votes
             if no_match or pid != truth[by_card[cid]]]
    figures = evaluate_stage_d(engine, [{"identifier": row["file"], "set_code": row["set"],
                                         "collector_number": row["collector_number"], "lang": row["lang"]}
                                        for row in labels])
    with capsys.disabled():
        print(f"\nreal photos: collector number right {number_right}/{len(labels)}, set code right "
              f"{set_right}/{len(labels)}, votes cast {len(votes)}, votes right {len(votes) - len(wrong)}, "
              f"routed to review {figures['routed_to_review']}")
        for row in labels:
            ev = read[row["file"]]
            print(f"  {row['file']}: read {ev and ev.collector_set_code}/{ev and ev.collector_number} "
                  f"artist {ev and ev.artist_name!r}, border {ev and ev.layout_class}")

    assert wrong == []
    assert figures["machine_votes"] == len(votes)
    assert figures["machine_votes_correct"] == len(votes)
    assert figures["wrong_resolutions"] == 0
