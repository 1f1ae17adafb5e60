"""Name normalisation and the cached candidate name index."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.stage_d import name_index as ni
from stage_e_dagster.stage_d.names import normalize_collector_number, normalize_name, strip_upload_noise

from .builders import CatalogueBuilder


def test_normalize_name_drops_accents_punctuation_and_case() -> None:
    assert normalize_name("Jötun Grunt") == "jotun grunt"
    assert normalize_name("Fell Beast’s Shriek") == normalize_name("Fell Beasts Shriek")
    assert normalize_name("Boseiju, Who Endures") == "boseiju who endures"
    assert normalize_name("Snow-Covered Forest") == "snow covered forest"


def test_upload_noise_is_stripped() -> None:
    assert strip_upload_noise("Tithe Taker (1).png") == "Tithe Taker"
    assert strip_upload_noise("Tithe Taker - Copy") == "Tithe Taker"
    assert strip_upload_noise("Tithe Taker - Copy (2).jpg") == "Tithe Taker"
    assert strip_upload_noise("Copy of Tithe Taker") == "Tithe Taker"


def test_collector_numbers_compare_without_leading_zeros() -> None:
    assert normalize_collector_number("041") == "41"
    assert normalize_collector_number("0100") == "100"
    assert normalize_collector_number("★007") == "★7"
    assert normalize_collector_number("A-237") == "a-237"
    assert normalize_collector_number("74A") == "74a"
    assert normalize_collector_number(None) == ""


def test_lookup_tiers(sqlite_engine: sa.Engine) -> None:
    b = CatalogueBuilder(sqlite_engine)
    delver = b.printing("Delver of Secrets // Insectile Aberration", "isd", "51")
    bolt = b.printing("Lightning Bolt", "m10", "146")
    b.printing("Sea Gate", "zen", "1")
    b.printing("Seag Ate", "zen", "2")  # collapses to the same spaceless form as "Sea Gate"
    with Session(sqlite_engine) as s:
        index = ni.build_name_index(s)
    assert [c.id for c in index.candidates_for("Insectile Aberration").candidates] == [delver]
    assert index.candidates_for("delver of secrets // insectile aberration").tier == "direct"
    found = index.candidates_for("Lightning Bolt - Copy (1).png")
    assert (found.tier, [c.id for c in found.candidates]) == ("noise-stripped", [bolt])
    found = index.candidates_for("LightningBolt")
    assert (found.tier, [c.id for c in found.candidates]) == ("de-concatenated", [bolt])
    assert index.candidates_for("SeaGate").tier == "none"  # two real names collapse to it: refused
    assert index.candidates_for("Nothing Like It").candidates == ()
    assert "isd" in index.lexicon and "m10" in index.lexicon


def test_index_is_cached_until_the_catalogue_changes(sqlite_engine: sa.Engine) -> None:
    ni.invalidate_name_index()
    b = CatalogueBuilder(sqlite_engine)
    b.printing("Lightning Bolt", "m10", "146")
    with Session(sqlite_engine) as s:
        first = ni.get_name_index(s)
        assert ni.get_name_index(s) is first
    b.printing("Counterspell", "m10", "50")
    with Session(sqlite_engine) as s:
        second = ni.get_name_index(s)
    assert second is not first
    assert second.candidates_for("Counterspell").candidates
