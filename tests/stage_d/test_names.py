"""Name normalisation and the cached candidate name index."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.collector_line import normalize_collector_number
from stage_e_dagster.catalog.models import PrintingVote
from stage_e_dagster.stage_d import name_index as ni
from stage_e_dagster.stage_d.names import normalize_name, strip_upload_noise
from stage_e_dagster.stage_d.run import run_stage_d

from .builders import CatalogueBuilder


def printed(engine: sa.Engine, printing_id: int, name: str | None = None, faces: list[str] | None = None) -> int:
    """Give a builder's printing the printed names a non-English Scryfall record carries."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE printings SET printed_name = :name, printed_face_names = :faces WHERE id = :id"),
                     {"name": name, "faces": None if faces is None else json.dumps(faces), "id": printing_id})
    return printing_id


def test_normalize_name_drops_accents_punctuation_and_case() -> None:
    assert normalize_name("Jötun Grunt") == "jotun grunt"
    assert normalize_name("Fell Beast’s Shriek") == normalize_name("Fell Beasts Shriek")
    assert normalize_name("Boseiju, Who Endures") == "boseiju who endures"
    assert normalize_name("Snow-Covered Forest") == "snow covered forest"
    assert normalize_name("Bibliothèque sylvestre") == normalize_name("BIBLIOTHEQUE  Sylvestre!") == \
        "bibliotheque sylvestre"
    assert normalize_name("Æther Vial") == normalize_name("Aether Vial") == "aether vial"
    assert normalize_name("Straßenkämpfer") == normalize_name("STRASSENKAMPFER") == "strassenkampfer"
    assert normalize_name("Fell Beast‘s Shriek") == normalize_name("Fell Beastʼs Shriek") == "fell beasts shriek"
    # Accents are dropped from Latin letters only: a kana's voicing mark or a Cyrillic breve is part of the letter.
    assert normalize_name("ガイアの揺籃の地") != normalize_name("カイアの揺籃の地")
    assert normalize_name("Йод") == "йод" and normalize_name("稲妻") == "稲妻"


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


def german_bolt(engine: sa.Engine) -> dict[str, int]:
    b = CatalogueBuilder(engine)
    ids = {
        "m10_en": b.printing("Lightning Bolt", "m10", "146"),
        "m10_de": b.printing("Lightning Bolt", "m10", "146", lang="de"),
        "m11_en": b.printing("Lightning Bolt", "m11", "149"),
        "4ed_de": b.printing("Lightning Bolt", "4ed", "208", lang="de", frame="2003"),
        "vow_en": b.printing("Delver of Secrets // Insectile Aberration", "isd", "51"),
        "vow_de": b.printing("Delver of Secrets // Insectile Aberration", "isd", "51", lang="de"),
    }
    for key in ("m10_de", "4ed_de"):
        printed(engine, ids[key], "Blitzschlag")
    printed(engine, ids["vow_de"], "Pirscher der Geheimnisse // Insektenhafte Monstrosität",
            ["Pirscher der Geheimnisse", "Insektenhafte Monstrosität"])
    return ids


def test_a_printed_name_finds_the_card_in_its_language(engine: sa.Engine) -> None:
    ids = german_bolt(engine)
    with Session(engine) as s:
        index = ni.build_name_index(s)
    found = index.candidates_for("Blitzschlag")
    # Every set that holds the card stays a candidate (m11 in English only), so no set looks like one
    # without it; where the German printing exists, the English one of the same slot gives way.
    assert (found.tier, found.printed_langs) == ("direct", {"de"})
    assert [c.id for c in found.candidates] == [ids["m10_de"], ids["m11_en"], ids["4ed_de"]]
    assert [c.id for c in index.candidates_for("BLITZSCHLAG (2).jpg").candidates] == [
        ids["m10_de"], ids["m11_en"], ids["4ed_de"]]
    english = index.candidates_for("Lightning Bolt")
    assert english.printed_langs == frozenset() and len(english.candidates) == 4
    for face in ("Insektenhafte Monstrositat", "pirscher der geheimnisse"):
        assert [c.id for c in index.candidates_for(face).candidates] == [ids["vow_de"]], face
    assert len(index.candidates_for("Insectile Aberration").candidates) == 2


def test_stage_d_votes_the_german_printing_for_a_german_upload(sqlite_engine: sa.Engine) -> None:
    ids = german_bolt(sqlite_engine)
    b = CatalogueBuilder(sqlite_engine)
    unread_lang = b.card("Blitzschlag", evidence=dict(collector_set_code="m10", collector_number="146"))
    other_set = b.card("Blitzschlag.png", evidence=dict(collector_set_code="m11", collector_number="7"))
    unknown = b.card("Nothing Printed Like It", evidence=dict(collector_set_code="m10", collector_number="146"))
    run_stage_d(sqlite_engine, None, run_id="r")
    with sqlite_engine.connect() as conn:
        cast = {row[0]: tuple(row[1:]) for row in conn.execute(
            sa.select(PrintingVote.card_id, PrintingVote.printing_id, PrintingVote.is_no_match))}
    assert cast[unread_lang] == (ids["m10_de"], False)
    assert other_set not in cast  # m11 holds the card: a wrong number there abstains, never no-match
    assert unknown not in cast


def test_a_re_import_that_fills_printed_names_moves_the_stamp(sqlite_engine: sa.Engine) -> None:
    b = CatalogueBuilder(sqlite_engine)
    de = b.printing("Lightning Bolt", "m10", "146", lang="de")
    with Session(sqlite_engine) as s:
        stale = ni.get_name_index(s)
    printed(sqlite_engine, de, "Blitzschlag")  # in place, as a re-import after migration 0007 does
    with Session(sqlite_engine) as s:
        fresh = ni.get_name_index(s)
    assert stale.candidates_for("Blitzschlag").candidates == ()
    assert fresh.stamp != stale.stamp
    assert [c.id for c in fresh.candidates_for("Blitzschlag").candidates] == [de]
