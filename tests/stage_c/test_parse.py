"""The tolerant collector-line parse on the misreads Tesseract really makes on small type."""

from __future__ import annotations

import pytest

from stage_e_dagster.stage_c.parse import (
    normalize_number,
    parse_artist,
    parse_artist_after_language,
    parse_collector_lines,
    parse_legal,
    repair_set_code,
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
