"""The tolerant collector-line parse on the misreads Tesseract really makes on small type."""

from __future__ import annotations

import pytest

from stage_e_dagster.stage_c.parse import (
    NUMBER_BARE,
    NUMBER_RARITY,
    NUMBER_SLASH,
    SET_CODE_DIRECT,
    SET_CODE_REPAIRED,
    copyright_line_number,
    normalize_number,
    parse_artist,
    parse_artist_after_language,
    parse_collector_lines,
    parse_legal,
    repair_set_code,
    resolve_set_code,
)

LEXICON = frozenset({"dmu", "fdn", "jthb", "fc5", "kmk", "gff", "jfn"})


@pytest.mark.parametrize(
    ("text", "number", "code", "lang"),
    [
        ("041/281 C\nDMU \u2022 EN", "41", "dmu", "en"),
        ("C 0100\nFDN \u2022 EN", "100", "fdn", "en"),
        ("26 1/336 U\nJTHB* EN / Wade Holm", "261", "jthb", "en"),
        ("164/408 M\nGFF*eEN / Sven Fischer", "164", "gff", "en"),
        ("058/403 R\nJEN\u00b0 EN / Elio Ortiz", "58", "jfn", "en"),      # F read as E, repaired by the lexicon
        ("M0154\nKMK* tT 7 Sven ibsen", "154", "kmk", None),                # language misread: known code accepted
        ("O41/281 C\nDMU e EN", "41", "dmu", "en"),                          # O for zero in the number
    ],
)
def test_collector_parse(text: str, number: str, code: str, lang: str | None) -> None:
    parse = parse_collector_lines(text, LEXICON)
    assert (parse.collector_number, parse.set_code, parse.language) == (number, code, lang)
    assert parse.set_code_known


def test_unknown_code_is_kept_but_flagged() -> None:
    parse = parse_collector_lines("041/281 C\nQQX \u2022 EN", LEXICON)
    assert parse.set_code == "qqx" and not parse.set_code_known


def test_clipped_newer_style_number_is_flagged_for_another_read() -> None:
    assert not parse_collector_lines("R012\nKVS*EN", LEXICON | {"kvs"}).number_complete
    assert parse_collector_lines("R 0152\nKVS*EN", LEXICON | {"kvs"}).number_complete


def test_no_number_on_old_frames() -> None:
    parse = parse_collector_lines("Illus. Anna Adler\n\u00a9 1995 Wizards of the Coast", LEXICON)
    assert parse.collector_number is None and parse.set_code is None


def test_repair_refuses_ambiguous_fixes() -> None:
    assert repair_set_code("0ne", frozenset({"one", "dne"})) == ("0ne", False)


def test_artist_and_legal() -> None:
    assert parse_artist("Illus. Anna Adler\n\u00a9 1995 Wizards") == ("Anna Adler", True)
    assert parse_artist_after_language("DMU \u2022 EN / Sven Holm") == "Sven Holm"
    assert parse_artist("Illus. Rosa Ibsen PROXY - NOT FOR SALE") == ("Rosa Ibsen", True)
    assert parse_artist_after_language("KVS * EN 7 UmarStone") == "Umar Stone"
    assert parse_legal("\u2122 & \u00a9 2018 Wizards of the Coast") == (2018, False)
    assert parse_legal("PROXY - NOT FOR SALE\nWizards 2020") == (2020, True)
    assert normalize_number("0041") == "41" and normalize_number("000") == "0"


# Issue 11: what real photos print and Tesseract reads.

REAL = LEXICON | {"frf", "den", "ita", "bfz", "avr", "esp"}


@pytest.mark.parametrize(
    ("text", "code", "lang"),
    [
        ("106/185 C\nFRF * EN te SLAWOMIR MANIAK", "frf", "en"),   # not language FR plus "F"
        ("012/250 U\nDEN \u2022 EN", "den", "en"),                 # not language DE
        ("007/100 C\nITA*EN", "ita", "en"),                        # not language IT
        ("041/281 C\nESP \u2022 FR", "esp", "fr"),                 # not language ES; FR is the language
        ("164/408 M\nGFF*eEN", "gff", "en"),                       # a bullet misread as "e" glued to EN
    ],
)
def test_language_codes_are_whole_tokens(text: str, code: str, lang: str) -> None:
    parse = parse_collector_lines(text, REAL)
    assert (parse.set_code, parse.language, parse.set_code_known) == (code, lang, True)
    assert parse.set_code_source == SET_CODE_DIRECT


def test_set_code_source_says_direct_or_repaired() -> None:
    assert parse_collector_lines("058/403 R\nJEN\u00b0 EN", LEXICON).set_code_source == SET_CODE_REPAIRED
    assert parse_collector_lines("041/281 C\nDMUe EN", LEXICON).set_code_source == SET_CODE_DIRECT  # bullet peeled
    assert resolve_set_code("jen", LEXICON) == ("jfn", True, SET_CODE_REPAIRED)
    assert resolve_set_code("dmue", LEXICON) == ("dmu", True, SET_CODE_DIRECT)
    assert parse_collector_lines("041/281 C", LEXICON).set_code_source is None


def test_junk_line_is_not_repaired_into_a_set_code_off_the_language_marker() -> None:
    # "JEN" on a frame-edge line repairs to "jfn"; without a language marker only a code as printed counts.
    parse = parse_collector_lines("058/403 R\nJEN 7 ebro", LEXICON)
    assert parse.set_code is None and not parse.set_code_known
    assert parse_collector_lines("M0154\nKMK* tT 7", LEXICON).set_code == "kmk"  # as printed: still accepted


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("t74/274 C\nDMU \u2022 EN", "74"),
        ("Wizards of the Coast LLC68/244", "68"),
        ("y 171/274 C (i\nBFZ\u00bb EN", "171"),
    ],
)
def test_glued_tokens_give_the_number(text: str, number: str) -> None:
    parse = parse_collector_lines(text, REAL)
    assert (parse.collector_number, parse.number_source) == (number, NUMBER_SLASH)


def test_l_glued_to_a_number_is_still_read_as_a_one() -> None:
    assert parse_collector_lines("l74/274 C", LEXICON).collector_number == "174"


def test_number_at_the_end_of_the_copyright_line() -> None:
    line = "Illus. Jaime Jones\nTM & \u00a9 1993-2012 Wizards of the Coast LLC 68/244"
    assert copyright_line_number(line) == "68"
    assert parse_collector_lines(line, LEXICON).collector_number == "68"
    assert copyright_line_number("\u00a9 2015 Wizards of the Coast") is None
    assert copyright_line_number("171/274 C\nBFZ \u2022 EN") is None   # a number, but not on the copyright line


def test_number_source_marks_a_bare_number_as_weak() -> None:
    bare = parse_collector_lines("SATU Tene ebro) 6 WA", LEXICON)
    assert (bare.collector_number, bare.number_source, bare.number_is_weak) == ("6", NUMBER_BARE, True)
    assert parse_collector_lines("C 0100\nFDN \u2022 EN", LEXICON).number_source == NUMBER_RARITY
    assert not parse_collector_lines("041/281 C", LEXICON).number_is_weak


def test_copyright_range_gives_its_end() -> None:
    assert parse_legal("TM & \u00a9 1993-2012 Wizards of the Coast LLC 68/244") == (2012, False)
    assert parse_legal("\u00a9 1995 Wizards of the Coast") == (1995, False)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("ILLUS. JOHN AVON", "John Avon"),
        ("Illus. JOHN AVON \u2122 & \u00a9 2015 Wizards", "John Avon"),
        ("Illus. RON SPENCER PROXY - NOT FOR SALE", "Ron Spencer"),
        ("ILLUS. ALEKS! BRICLOT", "Aleksi Briclot"),
        ("Itus. Nils Dorn\n\u00a9 2002 Wizards of the Coast", "Nils Dorn"),   # the double l read as t
    ],
)
def test_illus_credit_in_capitals_and_misread(text: str, name: str) -> None:
    assert parse_artist(text) == (name, True)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("BFZ\u00bb EN Mm SVETLIN VELINOY WS \u00a9 2015 Wizards of the Coast", "Svetlin Velinoy"),
        ("PCA + EN de DAARKEN MA 2000 Wizards of the Coast", "Daarken"),
        ("IMA+ EN te ALEKS! BRICLOT", "Aleksi Briclot"),
        ("FRF * EN te SLAWOMIR MANIAK", "Slawomir Maniak"),
    ],
)
def test_artist_in_capitals_after_the_language(line: str, name: str) -> None:
    assert parse_artist_after_language(line) == name


def test_capitals_that_are_not_a_name() -> None:
    assert parse_artist_after_language("DMU \u2022 EN PROXY NOT FOR SALE") is None
    assert parse_artist("ILLUS. TM") == (None, False)


def test_a_weak_bare_number_does_not_stop_the_read_tiers() -> None:
    """The OCR stop rule takes a parse as a confident read only when its number is not a bare one
    (or stands beside a set code read as printed)."""
    from stage_e_dagster.stage_c.ocr import _usable

    assert not _usable(parse_collector_lines("SATU Tene ebro) 6 WA", LEXICON), LEXICON)
    assert not _usable(parse_collector_lines("6\nJEN \u2022 EN", LEXICON), LEXICON)   # beside a repaired code
    assert _usable(parse_collector_lines("6\nDMU \u2022 EN", LEXICON), LEXICON)
    assert _usable(parse_collector_lines("041/281 C\nDMU \u2022 EN", LEXICON), LEXICON)


def test_set_and_language_read_as_one_token_through_a_misread_bullet() -> None:
    """Issue 20: the bullet of ``BFZ • EN`` read as a letter glues the line into one token."""
    lexicon = frozenset({"bfz", "dmu"})
    for text, code in (("174/274C\nBFZBEN", "bfz"), ("174/274C\nBFZHEN", "bfz"), ("078/281U\nDMUREN", "dmu")):
        parse = parse_collector_lines(text, lexicon)
        assert (parse.set_code, parse.language, parse.set_code_known) == (code, "en", True), text
    # Only a known code as printed, at the start of the line, with a language after one glued glyph.
    assert parse_collector_lines("041/281 C\nXDMUREN", lexicon).set_code is None
    assert parse_collector_lines("041/281 C\nZZQBEN", lexicon).set_code is None
