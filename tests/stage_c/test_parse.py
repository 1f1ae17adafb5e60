"""The artist credit and the legal line, parsed from the rows the reader hands over."""

from __future__ import annotations

import pytest

from stage_e_dagster.catalog.collector_line import marked_years, normalize_collector_number
from stage_e_dagster.stage_c.parse import parse_artist, parse_artist_after_language, parse_legal, prints_no_number


def test_artist_and_legal() -> None:
    assert parse_artist("Illus. Anna Adler\n\u00a9 1995 Wizards") == ("Anna Adler", True)
    assert parse_artist_after_language("DMU \u2022 EN / Sven Holm") == "Sven Holm"
    assert parse_artist("Illus. Rosa Ibsen PROXY - NOT FOR SALE") == ("Rosa Ibsen", True)
    assert parse_artist_after_language("KVS * EN 7 UmarStone") == "Umar Stone"
    assert parse_legal("\u2122 & \u00a9 2018 Wizards of the Coast") == (2018, False)
    assert parse_legal("PROXY - NOT FOR SALE\nWizards 2020") == (2020, True)
    assert normalize_collector_number("0041") == "41" and normalize_collector_number("000") == "0"


def test_one_marked_year_rule_for_both_stages() -> None:
    """Stage C stores the first marked year and Stage D trusts a stored year only when it is marked: one
    rule, in catalog/collector_line.py. A range gives its end; a year starting its line before "Wizards"
    is marked (the small mark is often lost); one after other words is not."""
    assert marked_years("\u2122 & \u00a9 1993-2012 Wizards of the Coast") == [2012]
    assert marked_years("Illus. Anna Adler\n1995 Wizards of the Coast") == [1995]
    assert marked_years("MA 2000 Wizards of the Coast") == []
    assert marked_years("(c) 1994 Wizards, copyright 1995") == [1994, 1995]
    assert marked_years("\u00a9 19955 Wizards") == []


def test_copyright_range_gives_its_end() -> None:
    assert parse_legal("TM & \u00a9 1993-2012 Wizards of the Coast LLC 68/244") == (2012, False)
    assert parse_legal("\u00a9 1995 Wizards of the Coast") == (1995, False)
    # The reader drops the small mark: a year before "Wizards" is still the legal line's.
    assert parse_legal("1995 Wizards of the Coast, Inc. All rights reserved.") == (1995, False)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("ILLUS. JOHN AVON", "John Avon"),
        ("Illus. JOHN AVON \u2122 & \u00a9 2015 Wizards", "John Avon"),
        ("Illus. RON SPENCER PROXY - NOT FOR SALE", "Ron Spencer"),
        ("ILLUS. ALEKS! BRICLOT", "Aleksi Briclot"),
        ("Itus. Nils Dorn\n\u00a9 2002 Wizards of the Coast", "Nils Dorn"),   # the double l read as t
        ("Illus. \u00a9Anson Maddocks \u2605/", "Anson Maddocks"),
    ],
)
def test_illus_credit_in_capitals_and_misread(text: str, name: str) -> None:
    assert parse_artist(text) == (name, True)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("BFZ\u00b7EN SVETLIN VELINOY TM & \u00a9 2015 Wizards of the Coast", "Svetlin Velinoy"),
        ("SOI\u00b7ENVINCENT PROCE & \u00a9 2016 Wizards of the Coast", "Vincent Proce"),   # the space lost
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


def test_a_legal_line_from_before_1998_says_the_frame_prints_no_number() -> None:
    """Collector numbers were first printed in 1998 (Exodus): a legal line whose every year is earlier
    settles the reader's look for one; a range reaching 1998 or later, or no legal line, does not."""
    assert prints_no_number(["Illus. Dan Frazier", "\u00a9 1995 Wizards of the Coast, Inc."])
    assert prints_no_number(["Illus. \u00a9 1994 Jesper Myrfors"])
    assert not prints_no_number(["TM & \u00a9 1993-2010 Wizards of the Coast LLC 137/248"])
    assert not prints_no_number(["Illus. Dan Frazier", "1995"])  # a bare year is not a legal line
    assert not prints_no_number(["Gary Leach", "2/1"])


def test_the_early_credit_says_the_frame_prints_no_number() -> None:
    """The 1993-1994 frames (Alpha to Revised, as read on 2ed-244 and 3ed-123) print a copyright mark before
    the artist's name and neither a legal line nor a number: the credit alone settles the read, where
    before both paid a closer look (and Revised the wide one too) for nothing."""
    assert prints_no_number(["an unblocked creature.", "Illus. \u00a9 Dan Frazier"])
    assert prints_no_number(["Illus. \u00a9\u00b7Anson Maddocks"])
    assert prints_no_number(["llus. (c)Anson Maddocks"])
    assert not prints_no_number(["Illus. Anson Maddocks"])
    assert not prints_no_number(["Illus. Dan Frazier \u00a9 1999 Wizards of the Coast 12/143"])
