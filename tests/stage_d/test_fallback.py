"""The fallback calculator: art hash with a margin, border and artist sub-checks, never no-match."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace
from typing import Any

import numpy as np

from stage_e_dagster.catalog.symbol_shape import shape_descriptor
from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.facts import PrintingFacts
from stage_e_dagster.stage_d.fallback import ART_MARGIN, ART_MAX_DISTANCE, decide_fallback

ART = 0x0F0F_0F0F_0F0F_0F0F


def flip(value: int, bits: int) -> int:
    """``value`` with its lowest ``bits`` bits inverted (Hamming distance = bits)."""
    return value ^ ((1 << bits) - 1)


def ev(**fields: Any) -> SimpleNamespace:
    base = dict(terminal=False, fetch_ok=True, is_truncated=False, layout_class="black", layout_confidence=0.9,
                artist_name=None, art_phash=flip(ART, 3), collector_set_code=None, collector_number=None)
    base.update(fields)
    return SimpleNamespace(**base)


def pf(pid: int, art: int | None, *, border: str = "black", artist: str = "Ann Artist") -> PrintingFacts:
    return PrintingFacts(pid, "dmu", str(pid), "en", artist, border, "2015", date(2022, 1, 1), art)


def test_votes_when_one_candidate_is_near_with_a_margin() -> None:
    d = decide_fallback(ev(), [pf(1, ART), pf(2, flip(ART, 30))])
    assert (d.kind, d.printing_id) == ("vote", 1)
    assert d.confidence == 0.8  # art plus the border reading


def test_close_runner_up_is_ambiguous() -> None:
    d = decide_fallback(ev(), [pf(1, ART), pf(2, flip(ART, 3 + ART_MARGIN - 1))])
    assert d.reason == A.AMBIGUOUS


def test_shared_art_in_two_printings_is_ambiguous_unless_a_sub_check_separates_them() -> None:
    assert decide_fallback(ev(), [pf(1, ART), pf(2, ART)]).reason == A.AMBIGUOUS
    d = decide_fallback(ev(layout_class="borderless"), [pf(1, ART), pf(2, ART, border="borderless")])
    assert (d.kind, d.printing_id) == ("vote", 2)
    d = decide_fallback(ev(artist_name="Cy Painter"), [pf(1, ART), pf(2, ART, artist="Cy Painter")])
    assert (d.kind, d.printing_id) == ("vote", 2)


def test_far_art_is_eliminated_and_never_a_no_match() -> None:
    d = decide_fallback(ev(art_phash=flip(ART, ART_MAX_DISTANCE + 5)), [pf(1, ART)])
    assert (d.kind, d.reason) == ("abstain", A.ELIMINATED)


def test_a_border_reading_that_fits_no_candidate_is_not_a_veto() -> None:
    d = decide_fallback(ev(layout_class="white"), [pf(1, ART), pf(2, flip(ART, 30))])
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.7)


def test_missing_hashes_and_bad_images_abstain() -> None:
    assert decide_fallback(ev(art_phash=None), [pf(1, ART)]).reason == A.NO_ART_HASH
    assert decide_fallback(ev(), [pf(1, None)]).reason == A.NO_ART_HASH
    assert decide_fallback(ev(is_truncated=True), [pf(1, ART)]).reason == A.TRUNCATED_IMAGE
    assert decide_fallback(ev(terminal=True), [pf(1, ART)]).reason == A.UNREADABLE_IMAGE
    assert decide_fallback(ev(), []).reason == A.NO_CANDIDATES


def test_an_unsure_border_reading_narrows_nothing() -> None:
    # Read off the background: "borderless" would single out printing 2, but it is not the card's border.
    d = decide_fallback(ev(layout_class="borderless", layout_confidence=0.2),
                        [pf(1, ART), pf(2, ART, border="borderless")])
    assert d.reason == A.AMBIGUOUS
    d = decide_fallback(ev(layout_class="borderless", layout_confidence=None),
                        [pf(1, ART), pf(2, flip(ART, 30), border="borderless")])
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.7)


def test_art_that_contradicts_the_collector_line_abstains() -> None:
    # The collector line reads printing 2's number; the art is printing 1's: the readings disagree.
    d = decide_fallback(ev(collector_number="2"), [pf(1, ART), pf(2, flip(ART, 30))])
    assert (d.kind, d.reason) == ("abstain", A.READINGS_DISAGREE)
    # A line that reads no candidate's number (an OCR miss) does not stand in the way.
    d = decide_fallback(ev(collector_number="77"), [pf(1, ART), pf(2, flip(ART, 30))])
    assert (d.kind, d.printing_id) == ("vote", 1)


# Issue 30, item 5: old frames print no number; the legal line's year, the border and the art place them.

RATS = "Plague Rats"


def rats(pid: int, code: str, released: date, border: str) -> PrintingFacts:
    """Plague Rats printings share one illustration: the art hash alone cannot tell them apart."""
    return PrintingFacts(pid, code, str(pid), "en", "Anson Maddocks", border, "1993", released, ART)


PLAGUE_RATS = [rats(1, "lea", date(1993, 8, 5), "black"), rats(2, "2ed", date(1993, 12, 1), "white"),
               rats(3, "3ed", date(1994, 4, 11), "white"), rats(4, "4ed", date(1995, 4, 1), "white")]


def old_frame(**fields: Any) -> SimpleNamespace:
    base: dict[str, Any] = dict(layout_class="white", copyright_year=None, legal_raw_text=None,
                                title_text="Plague Rats\nSummon Rats")
    return ev(**{**base, **fields})


def test_an_old_frame_is_placed_by_its_legal_line_year_and_border() -> None:
    d = decide_fallback(old_frame(copyright_year=1995, legal_raw_text="1995 Wizards of the Coast, Inc."),
                        PLAGUE_RATS, RATS)
    assert (d.kind, d.printing_id) == ("vote", 4)
    assert {"legal-year", "border", "title"} <= set(d.detail["readings"])


def test_an_old_frame_abstains_when_two_printings_fit() -> None:
    # No legal line read (Revised prints none): the white-bordered three share the art.
    d = decide_fallback(old_frame(), PLAGUE_RATS, RATS)
    assert (d.kind, d.reason) == ("abstain", A.AMBIGUOUS)
    # A 1994 line fits Revised (1994) and Fourth Edition (released early 1995): still two.
    d = decide_fallback(old_frame(copyright_year=1994, legal_raw_text="\u00a9 1994 Wizards of the Coast"),
                        PLAGUE_RATS, RATS)
    assert (d.kind, d.reason) == ("abstain", A.AMBIGUOUS)


def test_a_stray_year_does_not_place_an_old_frame() -> None:
    """A year after other words ("MA 1995 Wizards") may be a misread mark: not the printing's year."""
    d = decide_fallback(old_frame(copyright_year=1995, legal_raw_text="MA 1995 Wizards"), PLAGUE_RATS, RATS)
    assert (d.kind, d.reason) == ("abstain", A.AMBIGUOUS)


def test_a_confident_other_title_blocks_the_fallback_s_vote() -> None:
    d = decide_fallback(old_frame(copyright_year=1995, legal_raw_text="1995 Wizards of the Coast, Inc.",
                                  title_text="Lightning Bolt\nInstant"), PLAGUE_RATS, RATS)
    assert (d.kind, d.reason) == ("abstain", A.NAME_DISAGREES)


# Issue 41, item 1: what the frame prints places an old frame when no art hash can (reprints share the art,
# and most catalogues hash no old printing).

def unhashed(printings: list[PrintingFacts]) -> list[PrintingFacts]:
    return [PrintingFacts(**{**p.__dict__, "art_phash": None}) for p in printings]


FOURTH = "1995 Wizands of the Coast, Ine. Allrighus reserved."   # 4ED's legal line as read on a real photo


def test_a_printed_year_places_an_old_frame_without_an_art_hash() -> None:
    d = decide_fallback(old_frame(copyright_year=1995, legal_raw_text=FOURTH, art_phash=None),
                        unhashed(PLAGUE_RATS), RATS)
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 4, 0.75)
    assert d.detail["readings"] == ["legal-year", "border", "title"]


def test_a_year_before_numbers_rules_out_later_reprints() -> None:
    stone = [PrintingFacts(1, "wth", "153", "en", "Adam Rex", "black", "1997", date(1997, 6, 9), None),
             PrintingFacts(2, "cmd", "257", "en", "Adam Rex", "black", "2003", date(2011, 6, 17), None)]
    d = decide_fallback(ev(copyright_year=1997, legal_raw_text="\u00a91997 Wizards of the Coast, Inc.",
                           art_phash=None, title_text="Mind Stone"), stone, "Mind Stone")
    assert (d.kind, d.printing_id) == ("vote", 1)
    # The same year read on a later line places nothing: a modern line may be a stamped reprint's.
    d = decide_fallback(ev(copyright_year=2011, legal_raw_text="TM & \u00a9 2011 Wizards of the Coast",
                           art_phash=None), stone, "Mind Stone")
    assert d.reason == A.NO_ART_HASH


def test_the_early_credit_and_the_border_place_an_unlimited_card() -> None:
    field = [PrintingFacts(1, "lea", "1", "en", "Dan Frazier", "black", "1993", date(1993, 8, 5), None),
             PrintingFacts(2, "leb", "1", "en", "Dan Frazier", "black", "1993", date(1993, 10, 4), None),
             PrintingFacts(3, "2ed", "244", "en", "Dan Frazier", "white", "1993", date(1993, 12, 1), None)]
    credit = dict(legal_raw_text="Illus. \u00a9 Dan Frazier", copyright_year=None, art_phash=None)
    d = decide_fallback(ev(layout_class="white", **credit), field, "Forcefield")
    assert (d.kind, d.printing_id) == ("vote", 3)
    assert d.detail["readings"][:2] == ["early-credit", "border"]
    # Without the border (a sleeve's glare), Alpha, Beta and Unlimited still fit: named, not guessed.
    d = decide_fallback(ev(layout_class=None, **credit), field, "Forcefield")
    assert (d.kind, d.reason) == ("abstain", A.AMBIGUOUS)
    assert d.detail["fitting_printings"] == ["lea/1", "leb/1", "2ed/244"]
    # Black-bordered: Alpha and Beta print the same face.
    d = decide_fallback(ev(layout_class="black", **credit), field, "Forcefield")
    assert (d.reason, d.detail["fitting_printings"]) == (A.AMBIGUOUS, ["lea/1", "leb/1"])


def test_a_stamped_reprint_keeps_the_first_printing_s_year() -> None:
    """The List reprints a card as first printed: its 1995 line fits the List printing too."""
    listed = [*unhashed(PLAGUE_RATS), PrintingFacts(9, "plst", "4ed-154", "en", "Anson Maddocks", "white",
                                                    "1993", date(2020, 9, 26), None)]
    d = decide_fallback(old_frame(copyright_year=1995, legal_raw_text=FOURTH, art_phash=None), listed, RATS)
    assert (d.reason, d.detail["fitting_printings"]) == (A.AMBIGUOUS, ["4ed/4", "plst/4ed-154"])


def test_an_art_hash_blocks_a_printed_placement_it_contradicts() -> None:
    rats_far = [*unhashed(PLAGUE_RATS[:3]), PrintingFacts(**{**PLAGUE_RATS[3].__dict__, "art_phash": flip(ART, 40)})]
    d = decide_fallback(old_frame(copyright_year=1995, legal_raw_text=FOURTH), rats_far, RATS)
    assert (d.kind, d.reason) == ("abstain", A.ELIMINATED)


def glyph(kind: str) -> bytes:
    """A stored symbol silhouette: a disc, a bar or a triangle (``catalog/symbol_shape.py``)."""
    mask = np.zeros((64, 64), bool)
    yy, xx = np.mgrid[:64, :64]
    if kind == "disc":
        mask = (yy - 32) ** 2 + (xx - 32) ** 2 <= 28 ** 2
    elif kind == "bar":
        mask[26:38, 4:60] = True
    else:
        mask = (yy >= 6) & (np.abs(xx - 32) <= (yy - 6) // 2)
    shape = shape_descriptor(mask)
    assert shape is not None
    return shape


def stones(weatherlight: str = "disc") -> list[PrintingFacts]:
    return [PrintingFacts(1, "wth", "153", "en", "Adam Rex", "black", "1997", date(1997, 6, 9), None,
                          symbol_shape=glyph(weatherlight)),
            PrintingFacts(2, "pg07", "11", "en", "Adam Rex", "black", "2003", date(2007, 1, 1), None,
                          symbol_shape=glyph("bar")),
            PrintingFacts(3, "10e", "335", "en", "Adam Rex", "black", "2003", date(2007, 7, 13), None,
                          symbol_shape=glyph("triangle"))]


def test_the_set_symbol_places_an_old_frame_whose_year_was_not_read() -> None:
    unread = dict(copyright_year=None, legal_raw_text="epos7 Wuasds ed the Cesa", art_phash=None,
                  title_text="Mind Stone")
    d = decide_fallback(ev(symbol_shape=glyph("disc"), **unread), stones(), "Mind Stone")
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.75)
    assert d.detail["readings"] == ["border", "symbol", "title"]
    # A symbol that wins a modern frame's set places nothing: that frame prints a number to read.
    d = decide_fallback(ev(symbol_shape=glyph("triangle"), **unread), stones(), "Mind Stone")
    assert d.reason == A.NO_ART_HASH
    # Two sets with one icon: no winner, nothing placed.
    d = decide_fallback(ev(symbol_shape=glyph("bar"), **unread), stones(weatherlight="bar"), "Mind Stone")
    assert d.reason == A.NO_ART_HASH


def test_a_card_that_prints_a_number_is_never_dated_by_its_year() -> None:
    """A modern reprint's "(c) 2017" misread as 1997, its number misread too (it places nothing): no date,
    so no vote for the 1997 printing."""
    stone = stones()
    d = decide_fallback(ev(copyright_year=1997, legal_raw_text="\u00a91997 Wizards of the Coast", art_phash=None,
                           collector_number="338", title_text="Mind Stone"), stone[:1] + stone[2:], "Mind Stone")
    assert d.reason == A.NO_ART_HASH
