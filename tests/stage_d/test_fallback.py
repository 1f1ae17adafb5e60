"""The fallback calculator: art hash with a margin, border and artist sub-checks, never no-match."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace
from typing import Any

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
