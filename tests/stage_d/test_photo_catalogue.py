"""The photo evaluation's scratch catalogue: real printings of a name as decoys, and a clear error for a bad
known-printings file (issue 41, item 5)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Expansion, Printing
from stage_e_dagster.evaluation.known_printings import KNOWN_PRINTINGS, load_known_printings
from stage_e_dagster.evaluation.labels import LabelFileError
from stage_e_dagster.evaluation.photos import PhotoLabel, build_photo_catalogue


def test_the_project_knows_the_printings_of_the_old_frames_in_the_photo_folders() -> None:
    known = load_known_printings()
    rats = {(p.set_code, p.border, p.released) for p in known["plague rats"]}
    assert ("4ed", "white", date(1995, 4, 1)) in rats and ("lea", "black", date(1993, 8, 5)) in rats
    assert {"goblin recruiter", "mind stone", "forcefield"} <= set(known)


def test_an_old_frame_s_decoys_are_its_name_s_real_printings(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'photos.sqlite'}")
    upgrade(engine)
    label = PhotoLabel(file="4ed-154.jpg", set_code="4ed", number="154", lang="en", name="Plague Rats",
                       border="white", printed_text="(none printed) Illus. Anson Maddocks / \u00a9 1995")
    truth = build_photo_catalogue(engine, [label])
    with Session(engine) as session:
        rows = session.execute(sa.select(Expansion.code, Printing.collector_number, Printing.border_color,
                                         Printing.released_at, Printing.id)
                               .join(Expansion, Expansion.id == Printing.expansion_id)
                               .where(Printing.name == "Plague Rats")).all()
    by_set = {code: (number, border, released, pid) for code, number, border, released, pid in rows}
    # The labelled printing once, dated from the known printings (the label gives no date).
    assert by_set["4ed"] == ("154", "white", date(1995, 4, 1), truth[("4ed", "154")])
    # Every other real printing beside it: other sets, borders and years.
    assert {"lea", "leb", "2ed", "3ed", "sum", "5ed", "30a"} <= set(by_set)
    assert by_set["lea"][1:3] == ("black", date(1993, 8, 5))
    # No made-up stamped reprint of a card The List never held.
    assert "plst" not in by_set
    engine.dispose()


def test_a_known_printings_file_with_a_bad_date_is_a_named_error(tmp_path: Path) -> None:
    bad = tmp_path / "known.csv"
    header = KNOWN_PRINTINGS.read_text(encoding="utf-8").splitlines()[0]
    bad.write_text(f"{header}\nPlague Rats,4ed,154,April 1995,white,1993,somewhere\n", encoding="utf-8")
    with pytest.raises(LabelFileError, match="not YYYY-MM-DD"):
        load_known_printings(bad)
    bad.write_text("name,set\nPlague Rats,4ed\n", encoding="utf-8")
    with pytest.raises(LabelFileError, match="missing column"):
        load_known_printings(bad)
