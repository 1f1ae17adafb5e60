"""Every collector-line format, read by the real Stage C (Tesseract) from a rendered card (issue 20, item 1).

The card is the corpus renderer's face; its bottom lines are drawn here in the card's small type,
in each of the layouts real cards print (``catalog/collector_line.py`` holds them as data):
2015-2022 ``041/281 C`` over ``DMU • EN`` and the artist; 2023+ rarity and a four-digit number then
``FDN • DE`` on one line; 2008-2014 ``Illus.`` over the copyright line ending in ``68/244``; and old
frames with no number at all.
"""

from __future__ import annotations

import io
from datetime import date

import pytest
from PIL import Image, ImageDraw

from stage_e_dagster.catalog.collector_line import COLLECTOR_FORMATS, formats_for_frame, prints_number
from stage_e_dagster.corpus.catalogue import PrintingSpec
from stage_e_dagster.corpus.render import BORDER_RGB, Variant, _font, render_face
from stage_e_dagster.stage_c.compute import compute_evidence

LEXICON = frozenset({"dmu", "fdn", "avr", "bfz", "3ed"})
HEIGHT = 1000


def face(border: str = "black") -> Image.Image:
    spec = PrintingSpec(key="t", set_code="DMU", name="Broodhunter Wurm", collector_number="41", lang="en",
                        rarity="C", artist="Svetlin Velinov", border_color=border, frame="2015", style="old",
                        released=date(2012, 5, 4), set_size=281, art_seed=3)
    return render_face(spec, Variant(height=HEIGHT))


def with_bottom_lines(image: Image.Image, lines: list[str], border: str, *, centred: bool = False) -> Image.Image:
    """``image`` with its bottom band repainted in the border colour and ``lines`` drawn in small type."""
    w, h = image.size
    out = image.copy()
    draw = ImageDraw.Draw(out)
    draw.rectangle((0, round(0.89 * h), w, h), fill=BORDER_RGB[border])
    ink = (0, 0, 0) if border == "white" else (245, 245, 245)
    size = round(0.0175 * h)
    font = _font(size)
    for row, text in enumerate(lines):
        y = round(0.902 * h + row * size * 1.4)
        x = (w - draw.textlength(text, font=font)) / 2 if centred else round(0.055 * w)
        draw.text((x, y), text, font=font, fill=ink)
    return out


def read(image: Image.Image) -> dict[str, object]:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return compute_evidence("sha256:test", buf.getvalue(), latency_ms=None, lexicon=LEXICON).fields


def test_the_formats_are_data_with_one_entry_per_layout() -> None:
    assert [f.name for f in COLLECTOR_FORMATS] == ["2023+", "2015-2022", "pre-2015", "none"]
    assert [f.name for f in formats_for_frame("2003")] == ["pre-2015"]
    assert [f.name for f in formats_for_frame("2015")] == ["2023+", "2015-2022"]
    assert not prints_number("1993") and not prints_number("1997") and prints_number("2003")
    assert prints_number(None)  # an unknown frame may print one


def test_2015_2022_number_over_total_then_set_and_language() -> None:
    fields = read(with_bottom_lines(face(), ["041/281 C", "DMU \u2022 EN  Svetlin Velinov"], "black"))
    assert (fields["collector_number"], fields["collector_set_code"], fields["collector_language"]) == \
        ("41", "dmu", "en")


def test_2023_rarity_then_four_digit_number_set_and_german_on_one_line() -> None:
    fields = read(with_bottom_lines(face(), ["C 0100 FDN \u2022 DE"], "black"))
    assert (fields["collector_number"], fields["collector_set_code"], fields["collector_language"]) == \
        ("100", "fdn", "de")


def test_2023_two_lines_german() -> None:
    fields = read(with_bottom_lines(face(), ["C 0100", "FDN \u2022 DE  Svetlin Velinov"], "black"))
    assert (fields["collector_number"], fields["collector_set_code"], fields["collector_language"]) == \
        ("100", "fdn", "de")


def test_pre_2015_number_over_total_at_the_end_of_the_copyright_line() -> None:
    lines = ["Illus. Jaime Jones", "\u2122 & \u00a9 1993-2012 Wizards of the Coast LLC 68/244"]
    fields = read(with_bottom_lines(face(), lines, "black", centred=True))
    assert fields["collector_number"] == "68"
    assert fields["collector_set_code"] is None


def test_pre_2015_number_over_total_with_a_rarity_letter() -> None:
    fields = read(with_bottom_lines(face(), ["123/350 U", "Illus. Jaime Jones"], "black"))
    assert fields["collector_number"] == "123"


@pytest.mark.parametrize("border", ["white", "black"])
def test_old_frames_print_no_number(border: str) -> None:
    lines = ["Illus. Anson Maddocks", "\u00a9 1995 Wizards of the Coast, Inc."]
    fields = read(with_bottom_lines(face(border), lines, border, centred=True))
    assert fields["collector_number"] is None and fields["collector_set_code"] is None
    assert fields["artist_name"] == "Anson Maddocks"


def test_the_title_bar_is_read_as_the_card_s_name() -> None:
    """Issue 20, item 5: Stage C reads the name on the title bar (Stage D compares it with the upload's)."""
    fields = read(face())
    assert fields["title_text"] == "Broodhunter Wurm"
    assert fields["title_confidence"] >= 70


@pytest.mark.parametrize("px", [10, 14, 20])
def test_a_small_text_only_crop_of_the_collector_line_is_read(px: int) -> None:
    """Issue 20: a crop of the collector block alone (no card to find in it) gave no text: the
    bottom-band box of a card cut its last sliver. A wide strip with no card is read whole, upscaled
    as the band of a card about 12 times its height."""
    font = _font(px)
    strip = Image.new("RGB", (px * 6, round(px * 3.2)), (20, 20, 20))
    draw = ImageDraw.Draw(strip)
    for row, text in enumerate(["174/274 C", "BFZ - EN"]):
        draw.text((px * 0.4, px * 0.3 + row * px * 1.4), text, font=font, fill=(240, 240, 240))
    fields = read(strip)
    assert fields["localisation_method"] == "fallback"
    assert (fields["collector_number"], fields["collector_set_code"]) == ("174", "bfz")
