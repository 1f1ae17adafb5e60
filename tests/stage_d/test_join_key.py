"""The join-key calculator's rules, on plain evidence records and candidate facts."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace
from typing import Any

from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.facts import PrintingFacts
from stage_e_dagster.stage_d.join_key import decide_join_key

from .builders import printed_collector_text, printed_word_boxes

LEXICON = frozenset({"dmu", "fdn", "lea", "m10"})
COMPLETE = frozenset({"lea", "m10"})


def ev(**fields: Any) -> SimpleNamespace:
    """Evidence of a clean, confident read (raw text and word boxes follow the set code and number)."""
    base = dict(terminal=False, fetch_ok=True, is_truncated=False, layout_class="black", layout_confidence=0.9,
                collector_set_code="dmu", collector_number="041", collector_language=None, artist_name=None,
                copyright_year=None, legal_raw_text=None, illus_anchor_fired=False)
    base.update(fields)
    if "collector_line_raw_text" not in fields:
        base["collector_line_raw_text"] = printed_collector_text(base["collector_set_code"], base["collector_number"])
    if "collector_word_boxes" not in fields:
        base["collector_word_boxes"] = printed_word_boxes(base["collector_line_raw_text"])
    return SimpleNamespace(**base)


def pf(pid: int, code: str, number: str, *, lang: str = "en", artist: str = "Ann Artist", border: str = "black",
       frame: str = "2015", released: date = date(2022, 9, 9), printed_size: int | None = 281) -> PrintingFacts:
    """A candidate; its set prints 281 after the number, as ``printed_collector_text`` reads."""
    return PrintingFacts(pid, code, number, lang, artist, border, frame, released, None, printed_size)


DMU_41 = pf(1, "dmu", "41")
FDN_41 = pf(2, "fdn", "41")


def test_set_code_and_number_vote() -> None:
    d = decide_join_key(ev(), [DMU_41, FDN_41], LEXICON)
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.85)


def test_number_and_printed_total_when_no_set_code_was_read() -> None:
    d = decide_join_key(ev(collector_set_code=None), [DMU_41, pf(3, "fdn", "7")], LEXICON)
    assert (d.kind, d.printing_id, d.confidence) == ("vote", 1, 0.8)
    assert d.detail["confirmed_by"] == "printed-total"
    d = decide_join_key(ev(collector_set_code=None), [DMU_41, FDN_41], LEXICON)
    assert (d.kind, d.reason) == ("abstain", A.AMBIGUOUS)


def test_language_picks_the_printing_and_a_mismatch_abstains() -> None:
    fr = pf(5, "dmu", "41", lang="fr")
    assert decide_join_key(ev(collector_language="fr"), [DMU_41, fr], LEXICON).printing_id == 5
    assert decide_join_key(ev(), [DMU_41, fr], LEXICON).printing_id == 1  # English preferred when unread
    assert decide_join_key(ev(collector_language="de"), [DMU_41, fr], LEXICON).reason == A.LANGUAGE_MISMATCH


def test_no_match_only_for_a_known_set_without_the_name() -> None:
    d = decide_join_key(ev(collector_set_code="lea"), [DMU_41], LEXICON, complete_sets=COMPLETE)
    assert (d.kind, d.printing_id, d.confidence) == ("no-match", None, 0.6)
    assert decide_join_key(ev(collector_set_code="zzq"), [DMU_41], LEXICON).reason == A.UNKNOWN_SET_CODE
    assert decide_join_key(ev(collector_number="42"), [DMU_41], LEXICON).reason == A.NUMBER_NOT_IN_SET
    unparsed_set = ev(collector_set_code=None, collector_number="9")
    assert decide_join_key(unparsed_set, [DMU_41], LEXICON).reason == A.NO_SET_CODE_NO_MATCH


def test_agreement_checks_abstain_with_named_reasons() -> None:
    assert decide_join_key(ev(is_truncated=True), [DMU_41], LEXICON).reason == A.TRUNCATED_IMAGE
    assert decide_join_key(ev(layout_class="white"), [DMU_41], LEXICON).reason == A.BORDER_MISMATCH
    assert decide_join_key(ev(), [pf(1, "dmu", "41", frame="1997")], LEXICON).reason == A.FRAME_MISMATCH
    marked = "\u00a9 2019 Wizards of the Coast"
    assert decide_join_key(ev(copyright_year=2019, legal_raw_text=marked), [DMU_41], LEXICON).reason == \
        A.COPYRIGHT_YEAR_MISMATCH
    assert decide_join_key(ev(copyright_year=2020, legal_raw_text="\u00a9 2020"), [DMU_41], LEXICON).kind == "vote"
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


# Safe votes (issue 11): a no-match needs a set code read as printed, confirmed, in a complete set.

def test_no_match_refused_on_a_repaired_set_code() -> None:
    # Stage C read "LFA" and repaired it to "lea" through the look-alike table.
    repaired = ev(collector_set_code="lea", collector_line_raw_text="041/281 C\nLFA \u2022 EN")
    d = decide_join_key(repaired, [DMU_41], LEXICON, complete_sets=COMPLETE)
    assert (d.kind, d.reason) == ("abstain", A.SET_CODE_REPAIRED)


def test_no_match_refused_on_an_unconfirmed_set_code() -> None:
    text = printed_collector_text("lea", "041")
    weak = ev(collector_set_code="lea", collector_word_boxes=printed_word_boxes(text, conf=61.0))
    d = decide_join_key(weak, [DMU_41], LEXICON, complete_sets=COMPLETE)
    assert (d.kind, d.reason) == ("abstain", A.SET_CODE_UNCONFIRMED)


def test_no_match_refused_in_a_set_the_catalogue_may_hold_only_in_part() -> None:
    d = decide_join_key(ev(collector_set_code="lea"), [DMU_41], LEXICON, complete_sets=frozenset({"m10"}))
    assert (d.kind, d.reason) == ("abstain", A.SET_NOT_COMPLETE)
    assert decide_join_key(ev(collector_set_code="lea"), [DMU_41], LEXICON).reason == A.SET_NOT_COMPLETE


def test_no_match_refused_on_a_bare_number() -> None:
    bare = ev(collector_set_code="lea", collector_number="6", collector_line_raw_text="SATU 6 ebro\nLEA \u2022 EN")
    d = decide_join_key(bare, [DMU_41], LEXICON, complete_sets=COMPLETE)
    assert (d.kind, d.reason) == ("abstain", A.WEAK_READING)


def test_bare_number_without_a_printed_set_code_never_votes() -> None:
    # Junk from the frame edge: a lone "41" and no set code; the name has a printing numbered 41.
    junk = ev(collector_set_code=None, collector_line_raw_text="SATU Tene 41 WA")
    assert decide_join_key(junk, [DMU_41], LEXICON).reason == A.WEAK_READING
    # The same bare number beside a set code read as printed is a join key that agrees.
    beside_code = ev(collector_line_raw_text="41\nDMU \u2022 EN")
    assert decide_join_key(beside_code, [DMU_41], LEXICON).kind == "vote"


def test_copyright_line_number_confirmed_by_its_printed_total() -> None:
    old = ev(collector_set_code=None, collector_number="68",
             collector_line_raw_text="TM & \u00a9 1993-2012 Wizards of the Coast LLC 68/244")
    avr = pf(8, "avr", "68", frame="2003", printed_size=244)
    assert decide_join_key(old, [avr, pf(9, "ema", "68")], LEXICON).printing_id == 8


# Issue 20, item 2: a reading counts only when the catalogue confirms it.

def test_number_confirmed_by_its_printed_total_with_the_set_code_unreadable() -> None:
    # "DMU-E" read where "DMU \u2022 EN" is printed: no known code; the total 281 names the set.
    unreadable = ev(collector_set_code="dmue", collector_line_raw_text="041/281 C\nDMU-E")
    fdn_41 = pf(2, "fdn", "41", printed_size=271)
    d = decide_join_key(unreadable, [DMU_41, fdn_41], LEXICON)
    assert (d.kind, d.printing_id, d.detail.get("confirmed_by")) == ("vote", 1, "printed-total")
    no_code = ev(collector_set_code=None)
    assert decide_join_key(no_code, [DMU_41, fdn_41], LEXICON).printing_id == 1
    # Both sets print 281: the total cannot tell them apart.
    assert decide_join_key(no_code, [DMU_41, FDN_41], LEXICON).reason == A.AMBIGUOUS


def test_a_number_the_catalogue_cannot_confirm_is_a_weak_reading() -> None:
    unsized = pf(1, "dmu", "41", printed_size=None)
    d = decide_join_key(ev(collector_set_code=None), [unsized], LEXICON)
    assert (d.kind, d.reason) == ("abstain", A.UNCONFIRMED_READING)
    other_total = pf(1, "dmu", "41", printed_size=250)
    assert decide_join_key(ev(collector_set_code=None), [other_total], LEXICON).reason == A.UNCONFIRMED_READING


def test_a_total_that_contradicts_the_read_set_vetoes() -> None:
    d = decide_join_key(ev(), [pf(1, "dmu", "41", printed_size=250)], LEXICON)
    assert (d.kind, d.reason) == ("abstain", A.TOTAL_MISMATCH)


def test_look_alike_repair_counts_when_the_catalogue_holds_the_repaired_number() -> None:
    # "t74/274": the 1 of 174 read as a t. The name has 74 in a set of 281 and 174 in a set of 274.
    glued = ev(collector_set_code=None, collector_number="74", collector_line_raw_text="t74/274 C")
    d = decide_join_key(glued, [pf(7, "dmu", "74"), pf(8, "bfz", "174", printed_size=274)], LEXICON)
    assert (d.kind, d.printing_id, d.detail["number"], d.detail["read_as"]) == ("vote", 8, "174", "t74")
    assert d.detail["confirmed_by"] == "look-alike-repair"


def test_look_alike_repair_refused_when_the_catalogue_has_no_such_number() -> None:
    glued = ev(collector_set_code=None, collector_number="74", collector_line_raw_text="t74/274 C")
    d = decide_join_key(glued, [pf(7, "dmu", "74"), pf(8, "bfz", "175", printed_size=274)], LEXICON)
    assert (d.kind, d.reason) == ("abstain", A.REPAIR_UNCONFIRMED)
    assert d.detail["repairs"] == ["t74"]


def test_unsure_border_reading_is_no_veto() -> None:
    for unsure in (dict(layout_confidence=0.2), dict(layout_confidence=None)):
        d = decide_join_key(ev(layout_class="white", **unsure), [DMU_41], LEXICON)
        assert (d.kind, d.printing_id) == ("vote", 1), unsure
    assert decide_join_key(ev(layout_class="white", layout_confidence=0.5), [DMU_41], LEXICON).reason == \
        A.BORDER_MISMATCH


def test_confident_border_breaks_a_tie_and_an_unsure_one_does_not() -> None:
    white = pf(9, "fdn", "41", border="white")
    number_only = dict(collector_set_code=None)
    d = decide_join_key(ev(layout_class="white", **number_only), [DMU_41, white], LEXICON)
    assert (d.kind, d.printing_id) == ("vote", 9)
    d = decide_join_key(ev(layout_class="white", layout_confidence=0.3, **number_only), [DMU_41, white], LEXICON)
    assert d.reason == A.AMBIGUOUS


def test_a_stray_year_is_no_veto() -> None:
    stray = ev(copyright_year=2000, legal_raw_text="DAARKEN MA 2000 Wizards of the Coast")
    assert decide_join_key(stray, [DMU_41], LEXICON).kind == "vote"
    ranged = ev(copyright_year=2012, legal_raw_text="TM & \u00a9 1993-2012 Wizards of the Coast LLC")
    assert decide_join_key(ranged, [pf(8, "dmu", "41", released=date(2012, 5, 4))], LEXICON).kind == "vote"


# Issue 20, item 5: the title bar's name against the name the upload carries.

def test_a_title_that_reads_the_upload_s_name_raises_confidence() -> None:
    d = decide_join_key(ev(title_text="Broodhunter Wurm"), [DMU_41], LEXICON, name="Broodhunter Wurm")
    assert (d.kind, d.confidence, d.detail["title_agrees"]) == ("vote", 0.9, 1.0)
    start = decide_join_key(ev(title_text="Krosan TuskeF"), [DMU_41], LEXICON, name="Krosan Tusker")
    assert start.confidence == 0.9
    other_face = decide_join_key(ev(title_text="Insectile Aberration"), [DMU_41], LEXICON,
                                 name="Delver of Secrets // Insectile Aberration")
    assert other_face.confidence == 0.9


def test_a_title_that_names_another_card_blocks_the_vote() -> None:
    d = decide_join_key(ev(title_text="Lightning Shrieker"), [DMU_41], LEXICON, name="Broodhunter Wurm")
    assert (d.kind, d.reason, d.detail["title"]) == ("abstain", A.NAME_DISAGREES, "Lightning Shrieker")


def test_a_title_in_the_printing_s_language_agrees() -> None:
    german = PrintingFacts(1, "dmu", "41", "de", "Ann Artist", "black", "2015", date(2022, 9, 9), None, 281,
                           "Brutjäger-Wurm")
    d = decide_join_key(ev(title_text="Brutjäger-Wurm", collector_language="de"), [german], LEXICON,
                        name="Broodhunter Wurm")
    assert (d.kind, d.confidence) == ("vote", 0.9)


def test_a_title_too_short_or_unread_says_nothing() -> None:
    for title in (None, "", "—", "Rats"):
        d = decide_join_key(ev(title_text=title), [DMU_41], LEXICON, name="Broodhunter Wurm")
        assert (d.kind, d.confidence) == ("vote", 0.85), title


def test_look_alike_repair_inside_the_read_set() -> None:
    # "t74/274" beside "DMU • EN": dmu has no 74 for the name, but has 174.
    glued = ev(collector_number="74", collector_line_raw_text="t74/274 C\nDMU \u2022 EN")
    d = decide_join_key(glued, [pf(7, "dmu", "174", printed_size=274), pf(8, "fdn", "74")], LEXICON)
    assert (d.kind, d.printing_id, d.detail["read_as"], d.detail["confirmed_by"]) == \
        ("vote", 7, "t74", "look-alike-repair")
    # Without 174 in dmu the repair is refused: the number is simply not in the read set.
    assert decide_join_key(glued, [pf(7, "dmu", "175"), pf(8, "fdn", "74")], LEXICON).reason == A.NUMBER_NOT_IN_SET


# Issue 30, item 4: the title end's rows (the name, then the type line) as a key.

def test_the_title_row_that_is_a_name_speaks_for_the_title_end() -> None:
    rows = "Broodhunter Wurm\nCreature \u2014 Wurm"
    d = decide_join_key(ev(title_text=rows), [DMU_41], LEXICON, name="Broodhunter Wurm")
    assert (d.kind, d.confidence) == ("vote", 0.9)
    other = decide_join_key(ev(title_text="Lightning Shrieker\nCreature \u2014 Dragon"), [DMU_41], LEXICON,
                            name="Broodhunter Wurm")
    assert (other.kind, other.reason) == ("abstain", A.NAME_DISAGREES)


def test_a_misread_number_naming_a_printing_that_exists_is_blocked_by_the_title() -> None:
    """"16/303" read for "186/303": the upload's name has a printing at mh2 16, but the title reads
    another card, so the misread never becomes a vote."""
    misread = ev(collector_set_code="mh2", collector_number="16", collector_line_raw_text="16/303 R\nMH2 \u2605 EN",
                 title_text="Asmoranomardicadaistinaculdacar\nLegendary Creature \u2014 Human Wizard")
    d = decide_join_key(misread, [pf(5, "mh2", "16", printed_size=303)], LEXICON | {"mh2"}, name="Sanctum Weaver")
    assert (d.kind, d.reason) == ("abstain", A.NAME_DISAGREES)
