"""The join-key calculator's rules, on plain evidence records and candidate facts."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace
from typing import Any

from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.facts import PrintingFacts
from stage_e_dagster.stage_d.join_key import decide_join_key

LEXICON = frozenset({"dmu", "fdn", "lea", "m10"})


def ev(**fields: Any) -> SimpleNamespace:
    base = dict(terminal=False, fetch_ok=True, is_truncated=False, layout_class="black", collector_set_code="dmu",
                collector_number="041", collector_language=None, artist_name=None, copyright_year=None,
                illus_anchor_fired=False)
    base.update(fields)
    return SimpleNamespace(**base)


def pf(pid: int, code: str, number: str, *, lang: str = "en", artist: str = "Ann Artist", border: str = "black",
       frame: str = "2015", released: date = date(2022, 9, 9)) -> PrintingFacts:
    return PrintingFacts(pid, code, number, lang, artist, border, frame, released, None)


DMU_41 = pf(1, "dmu", "41")
FDN_41 = pf(2, "fdn", "41")


def test_set_code_and_number_vote() -> None:
    d = decide_join_key(ev(), [DMU_41, FDN_41], LEXICON)
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.85)


def test_number_only_when_no_set_code_was_read() -> None:
    d = decide_join_key(ev(collector_set_code=None), [DMU_41, pf(3, "fdn", "7")], LEXICON)
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.75)
    d = decide_join_key(ev(collector_set_code=None), [DMU_41, FDN_41], LEXICON)
    assert (d.kind, d.reason) == ("abstain", A.AMBIGUOUS)


def test_language_picks_the_printing_and_a_mismatch_abstains() -> None:
    fr = pf(5, "dmu", "41", lang="fr")
    assert decide_join_key(ev(collector_language="fr"), [DMU_41, fr], LEXICON).printing_id == 5
    assert decide_join_key(ev(), [DMU_41, fr], LEXICON).printing_id == 1  # English preferred when unread
    assert decide_join_key(ev(collector_language="de"), [DMU_41, fr], LEXICON).reason == A.LANGUAGE_MISMATCH


def test_no_match_only_for_a_known_set_without_the_name() -> None:
    d = decide_join_key(ev(collector_set_code="lea"), [DMU_41], LEXICON)
    assert (d.kind, d.printing_id, d.confidence) == ("no-match", None, 0.6)
    assert decide_join_key(ev(collector_set_code="zzq"), [DMU_41], LEXICON).reason == A.UNKNOWN_SET_CODE
    assert decide_join_key(ev(collector_number="42"), [DMU_41], LEXICON).reason == A.NUMBER_NOT_IN_SET
    unparsed_set = ev(collector_set_code=None, collector_number="9")
    assert decide_join_key(unparsed_set, [DMU_41], LEXICON).reason == A.NO_SET_CODE_NO_MATCH


def test_agreement_checks_abstain_with_named_reasons() -> None:
    assert decide_join_key(ev(is_truncated=True), [DMU_41], LEXICON).reason == A.TRUNCATED_IMAGE
    assert decide_join_key(ev(layout_class="white"), [DMU_41], LEXICON).reason == A.BORDER_MISMATCH
    assert decide_join_key(ev(), [pf(1, "dmu", "41", frame="1997")], LEXICON).reason == A.FRAME_MISMATCH
    assert decide_join_key(ev(copyright_year=2019), [DMU_41], LEXICON).reason == A.COPYRIGHT_YEAR_MISMATCH
    assert decide_join_key(ev(copyright_year=2020), [DMU_41], LEXICON).kind == "vote"  # within two years
    assert decide_join_key(ev(layout_class=""), [DMU_41], LEXICON).kind == "vote"     # no reading, no veto


def test_artist_disagreement_lowers_confidence() -> None:
    assert decide_join_key(ev(artist_name="Ann Artlst"), [DMU_41], LEXICON).confidence == 0.85
    assert decide_join_key(ev(artist_name="Bob Other"), [DMU_41], LEXICON).confidence == 0.65


def test_unusable_inputs_abstain() -> None:
    assert decide_join_key(ev(terminal=True, fetch_ok=False), [DMU_41], LEXICON).reason == A.UNREADABLE_IMAGE
    assert decide_join_key(ev(), [], LEXICON).reason == A.NO_CANDIDATES
    assert decide_join_key(ev(collector_number=None), [DMU_41], LEXICON).reason == A.NO_TEXT
    assert decide_join_key(ev(), [DMU_41], LEXICON, dpi=150).reason == A.LOW_DPI
    assert decide_join_key(ev(), [DMU_41], LEXICON, dpi=None).kind == "vote"
