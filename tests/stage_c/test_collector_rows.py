"""Each collector-line format parsed from text lines, as the scene-text reader hands them over (issue 30).

The rows are what PP-OCR read on real photos and on the synthetic corpus (one row per printed line,
boxes on one line joined), look-alike misreads included: O for 0, a bullet read as a letter or a
star, the slash read as a comma, the space between language and artist lost, a power/toughness box
beside the number. ``catalog/collector_line.py`` is the one place that knows the formats.
"""

from __future__ import annotations

import pytest

from stage_e_dagster.catalog.collector_line import (
    FORM_LEGAL,
    FORM_LONE,
    FORM_RARITY,
    FORM_SLASH,
    parse_collector_rows,
    repair_code,
    shows_several_cards,
)

SETS = frozenset({"bfz", "khm", "soi", "mh2", "c16", "war", "m11", "tmt", "fdn", "spg", "dmu", "avr", "ktk", "zen",
                  "tsp", "rna", "gff", "jfn", "frf", "den", "esp", "lwx", "neo"})

# (rows, number, form, total, set code, language)
CASES = [
    # 2015-2022: number over total and rarity, then SET • LANG and the artist.
    (["adjustments.", "4/3", "171/274 C", "BFZ\u00b7EN SVETLIN VELINOY TM & \u00a9 2015 Wizards of the Coast"],
     "171", FORM_SLASH, 274, "bfz", "en"),
    (["055/264 U", "WAR\u00b7SP KIERAN YANNER"], "55", FORM_SLASH, 264, "war", "es"),              # SP is Spanish
    (["035/351 M", "C16 * JP BASTIEN L. DEHARME & 2016 Wizards of the Coast"], "35", FORM_SLASH, 351, "c16", "ja"),
    (["O41/281 C", "DMU e EN"], "41", FORM_SLASH, 281, "dmu", "en"),                               # O for zero
    (["12/12", "186/303 R", "MH2 ENYAN PANCOAST"], "186", FORM_SLASH, 303, "mh2", "en"),            # 12/12 is P/T
    (["Artifact 3/3", "123/285 R", "KHM-EN ERIC DESCHAMPS & \u00a9 2021 Wizards"], "123", FORM_SLASH, 285, "khm", "en"),
    (["101,354 C", "LWX\u2022ENRosa Ibson"], "101", FORM_SLASH, 354, "lwx", "en"),                  # slash as comma
    (["164/408 M", "GFF*eEN"], "164", FORM_SLASH, 408, "gff", "en"),                              # bullet read as e
    (["174/274C", "BFZBEN"], "174", FORM_SLASH, 274, "bfz", "en"),                                # bullet read as B
    (["058/403 R", "JEN\u00b0 EN"], "58", FORM_SLASH, 403, "jfn", "en"),                          # F read as E
    (["012/250 U", "DEN \u2022 EN"], "12", FORM_SLASH, 250, "den", "en"),                         # a set, not DE
    (["041/281 C", "ESP \u2022 FR"], "41", FORM_SLASH, 281, "esp", "fr"),
    # 2023+: rarity letter and four digits.
    (["12/12", "R 0335", "FDN \u2022 EN lusTIn Gerard & \u00a9 2024 Wizards of the Coast"], "335", FORM_RARITY, None,
     "fdn", "en"),
    (["L 0193 2026 Viacom.", "TMT\u00b7EN BEMOCS TM& \u00a9 2026 Wizards of the Coast"], "193", FORM_RARITY, None,
     "tmt", "en"),
    (["M 0082 FDN Special Guest & \u00a9 2024 Wizards", "SPG\u00b7EN RAITA KAZAMA"], "82", FORM_RARITY, None,
     "spg", "en"),
    # A lone number beside the set-and-language token (showcase frames print no total).
    (["Artifact 3/3", "311 R", "KHM \u2022EN RICHARD LUONG & \u00a9 2021 Wizards"], "311", FORM_LONE, None,
     "khm", "en"),
    # 2003-2014: the number at the end of the legal line, no set code.
    (["Jaime Jones 3/3", "T & 1993-2012 Wizards of the Coast LLC 68/244"], "68", FORM_SLASH, 244, None, None),
    (["Justin Sweet 0/4", "1993-2006 Wizards of the Coast, Ine. 142/301"], "142", FORM_SLASH, 301, None, None),
    (["John Avon", "01993-2009 Wmards of L1.C230/249"], "230", FORM_SLASH, 249, None, None),        # glued to "LLC"
    (["Steven Belledin", "M & 1993-2010 Wizards of the Coast LLC 91"], "91", FORM_LEGAL, None, None, None),
    # Old frames: no number at all (the year range is not a four-digit number).
    (["Illus. Anson Maddocks */\u2605", "1995 Wizards of the Coast, Inc. All rights reserved."], None, None, None,
     None, None),
    (["C 1993-2012 Wizards"], None, None, None, None, None),
    (["4/4", "1/1"], None, None, None, None, None),
]


@pytest.mark.parametrize(("rows", "number", "form", "total", "code", "lang"), CASES)
def test_each_format_parsed_from_text_lines(rows: list[str], number: str | None, form: str | None,
                                            total: int | None, code: str | None, lang: str | None) -> None:
    parse = parse_collector_rows(rows, SETS)
    assert (parse.number, parse.form, parse.total, parse.set_code, parse.language) == (number, form, total, code, lang)
    if code is not None:
        assert parse.set_code_known


def test_an_unknown_code_is_kept_but_not_known() -> None:
    parse = parse_collector_rows(["041/281 C", "QQX \u2022 EN"], SETS)
    assert parse.set_code == "qqx" and not parse.set_code_known


def test_a_code_is_repaired_only_when_one_repair_fits() -> None:
    assert repair_code("jen", SETS) == "jfn"
    assert repair_code("0ne", frozenset({"one", "0me"})) == "one"
    assert repair_code("0ne", frozenset({"one", "dne", "ome"})) == "one"     # "dne" is no look-alike of "0ne"
    assert repair_code("s0i", frozenset({"soi", "s01"})) is None          # two repairs fit: no reading
    parse = parse_collector_rows(["041/281 C", "JEN \u2022 EN"], SETS)
    assert parse.set_code_repaired and parse.set_code == "jfn"


def test_an_artist_is_not_a_set_code() -> None:
    """"KARL KO" (Korean) and "ERIC DE" (German) read like a set and a language; the known code wins."""
    rows = ["210/297 C 2/1", "SOI\u00b7EN KARL KOPINSKI & \u00a9 2016 Wizards of the Coast"]
    parse = parse_collector_rows(rows, SETS)
    assert (parse.set_code, parse.language) == ("soi", "en")
    assert not shows_several_cards(["SOI\u00b7EN KARL KOPINSKI & \u00a9 2016 Wizards of the Coast"], SETS)


def test_the_bottom_lines_of_two_cards_are_several_cards() -> None:
    assert shows_several_cards(["C 0125 EOE \u2022 EN ... C 0185 EOE \u2022 EN"], SETS | {"eoe"})
    assert shows_several_cards(["TM & \u00a9 2012 Wizards 113/274   TM & \u00a9 2012 Wizards 134/158"], SETS)
    assert not shows_several_cards(["171/274 C", "BFZ\u00b7EN TM & \u00a9 2015 Wizards of the Coast"], SETS)


def test_a_number_whose_rarity_letter_was_not_read_is_still_the_number() -> None:
    """The 2019+ frames print "312 C" above "AFR \u2022 EN"; the rarity letter is a small glyph apart from the
    number, and the first look often finds the number's box alone, with the legal line between it and
    the set row (as read on afr-312 and khm-311). Before, that confirmed nothing and paid a closer look.
    A loyalty or a power (one or two digits) and a year split from its legal line are no number."""
    rows = ["312", "&  2021 Wizards of the Coast", "AFR \u00bb EN PHIL STONE"]
    parse = parse_collector_rows(rows, SETS | {"afr"})
    assert (parse.number, parse.form, parse.set_code) == ("312", FORM_LONE, "afr")
    assert parse_collector_rows(["0311", "KHM\u2022 EN RICHARD LUONG"], SETS | {"khm"}).number == "311"
    assert parse_collector_rows(["5", "KHM\u2022 EN RICHARD LUONG"], SETS | {"khm"}).number is None
    assert parse_collector_rows(["2021", "KHM\u2022 EN RICHARD LUONG"], SETS | {"khm"}).number is None
    # Only just above the set row: a number in the rules text further up is not the collector number.
    assert parse_collector_rows(["312", "Flavor text.", "AFR \u2022 EN PHIL STONE"], SETS | {"afr"}).number is None
