"""The scene-text reader with the real PP-OCR model the product ships (issue 30).

A card reads whichever way up it lies (the direction comes from the detected lines and the
direction classifier, not from the localiser), the model runs with no network at all (its ONNX files
come inside the rapidocr wheel), its sessions are built once per process with one thread each, and
an upload with no text is an abstention with its reason, never a vote.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from stage_e_dagster.corpus.catalogue import PrintingSpec, build_catalogue
from stage_e_dagster.corpus.render import Variant, render_card
from stage_e_dagster.stage_c import text_reader
from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.localise import card_with_margin, localise_card

SETS, SPECS = build_catalogue(random.Random(11), 80)
LEXICON = frozenset(s.code.lower() for s in SETS)
REAL_PHOTOS_2 = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real-photos-2"


def modern(k: int) -> PrintingSpec:
    return [p for p in SPECS if p.style in ("slash", "rarity")][k]


def on_a_table(card: Image.Image, turn: int) -> Image.Image:
    """The card turned ``turn`` degrees counter-clockwise, lying on a plain table with a margin."""
    turned = card.rotate(turn, expand=True)
    table = Image.new("RGB", (turned.width + 160, turned.height + 120), (120, 98, 70))
    table.paste(turned, (80, 60))
    return table


def png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("turn", [90, 180, 270])
def test_a_sideways_or_upside_down_card_reads(turn: int) -> None:
    p = modern(2)
    photo = on_a_table(render_card(p, Variant(height=900), noise_seed=4), turn)
    result = compute_evidence("h", png(photo), latency_ms=1.0, lexicon=LEXICON)
    fields = result.fields
    assert (fields["collector_number"], fields["collector_set_code"]) == (p.collector_number, p.set_code.lower())
    assert fields["title_text"].splitlines()[0] == p.name
    # The localised card is turned upright as well, so its art box is the art's.
    assert fields["localisation_rotation"] == turn % 360


@pytest.mark.skipif(not (REAL_PHOTOS_2 / "labels.csv").is_file(),
                    reason=f"real photos not present at {REAL_PHOTOS_2} (evaluation input kept outside the project)")
def test_a_real_upside_down_photo_reads() -> None:
    """A phone photo of a card turned about 150 degrees (soi-239): read as the card prints it."""
    data = (REAL_PHOTOS_2 / "soi-239_watcher-in-the-web_upside-down.jpg").read_bytes()
    fields = compute_evidence("h", data, latency_ms=1.0, lexicon=frozenset({"soi"})).fields
    assert (fields["collector_number"], fields["collector_set_code"], fields["collector_language"]) == \
        ("239", "soi", "en")
    assert fields["title_text"].splitlines()[0] == "Watcher in the Web"


def test_an_image_with_no_text_is_an_abstention_with_its_reason() -> None:
    blank = Image.new("RGB", (600, 840), (30, 90, 40))
    result = compute_evidence("h", png(blank), latency_ms=1.0, lexicon=LEXICON)
    assert result.fields["collector_number"] is None and result.fields["title_text"] is None
    assert result.skip_reasons["collector_line_ocr"] == "no-text"
    assert result.skip_reasons["title_ocr"] == "no-text"


READ_OFFLINE = """
import io, json, sys
from PIL import Image
from stage_e_dagster.stage_c import text_model
from stage_e_dagster.stage_c.text_reader import read_card_text
image = Image.open(io.BytesIO(sys.stdin.buffer.read()))
first = read_card_text(image)
models = text_model.models()
second = read_card_text(image)
det = models.det.session.session.get_session_options()
print(json.dumps({"rows": first.rows(), "same_engine": models is text_model.models(),
                  "same_rows": first.rows() == second.rows(),
                  "threads": [det.intra_op_num_threads, det.inter_op_num_threads]}))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) to cut the network")
def test_the_model_reads_with_the_network_unreachable() -> None:
    """In a network namespace of its own (no interface up, so no host resolves and nothing connects),
    a fresh process loads the model and reads a card: nothing is fetched at run time. Its sessions
    are built once and run one intra-op and one inter-op thread."""
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --net is not permitted here")
    p = modern(3)
    card = render_card(p, Variant(height=900), noise_seed=2)
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", READ_OFFLINE], input=png(card),
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert any(p.name in row for row in report["rows"]), report["rows"]
    assert report["same_engine"] and report["same_rows"]
    assert report["threads"] == [1, 1]
    # The probe can fail: without its network, a fetch in that namespace is refused.
    probe = subprocess.run(["unshare", "--net", sys.executable, "-c",
                            "import socket; socket.create_connection(('1.1.1.1', 443), timeout=3)"],
                           capture_output=True)
    assert probe.returncode != 0


def test_loading_the_reader_module_loads_no_model() -> None:
    """The sessions are built lazily: importing the reader imports neither rapidocr nor ONNX Runtime."""
    probe = ("import sys; import stage_e_dagster.stage_c.text_reader, stage_e_dagster.stage_c.text_model; "
             "print(sorted(m for m in ('rapidocr', 'onnxruntime', 'cv2') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_the_cheap_pass_reads_the_collector_end_with_one_small_look() -> None:
    """What tests that only need Stage C to have run use: a small copy, three rows, never closer."""
    p = modern(1)
    card = render_card(p, Variant(height=900), noise_seed=3)
    full = compute_evidence("h", png(card), latency_ms=1.0, lexicon=LEXICON).fields
    cheap = compute_evidence("h", png(card), latency_ms=1.0, lexicon=LEXICON, ocr_pass="cheap")
    assert cheap.ocr_passes == 1 and cheap.fields["collector_number"] in (p.collector_number, None)
    assert full["collector_number"] == p.collector_number
    assert len(cheap.fields["collector_line_raw_text"].splitlines()) <= 2


def test_the_rows_above_the_collector_line_are_read_only_when_its_last_two_confirm_nothing() -> None:
    """The collector end's last two rows are read first; the two above them (the rules text's last lines,
    the dearest crops) only when those confirm nothing, and then before any closer look."""
    from stage_e_dagster.catalog.collector_line import parse_collector_rows
    from stage_e_dagster.stage_c.text_reader import read_card_text

    p = modern(3)
    photo = on_a_table(render_card(p, Variant(height=900), noise_seed=6), 0)
    asked: list[int] = []

    def confirms_the_number(text) -> bool:  # type: ignore[no-untyped-def]
        asked.append(len(text.rows("collector")))
        return parse_collector_rows(text.rows("collector"), LEXICON).number == p.collector_number

    near = read_card_text(photo, confirms_the_number)
    assert near.passes == ("ends",) and len(asked) == 1 and asked[0] <= 2
    assert parse_collector_rows(near.rows("collector"), LEXICON).number == p.collector_number

    asked.clear()
    answers = iter([False, True])
    both = read_card_text(photo, lambda text: asked.append(len(text.rows("collector"))) or next(answers))
    assert both.passes == ("ends",) and len(asked) == 2 and asked[1] > asked[0]
    assert set(near.rows("collector")) <= set(both.rows("collector"))


@pytest.mark.skipif(not (REAL_PHOTOS_2 / "labels.csv").is_file(),
                    reason=f"real photos not present at {REAL_PHOTOS_2} (evaluation input kept outside the project)")
def test_a_card_read_on_its_own_still_sees_a_card_beside_it() -> None:
    """A webcam photo of a card with part of another beside it: the localiser is sure of the one card,
    and the read on that card alone sees one card's text; the upload's lines spread over more than one
    card's width, so the upload is several cards and nothing read on it may vote."""
    data = (REAL_PHOTOS_2 / "multi_afr-090_black-dragon_plus-partial-card_webcam.jpg").read_bytes()
    result = compute_evidence("h", data, latency_ms=1.0, lexicon=frozenset({"afr"}))
    assert result.fields["localisation_method"] == "several-cards"
    assert result.skip_reasons["card_localisation"] == "several-cards"


def test_a_crop_is_recognised_at_its_own_width_and_reads_as_padded_to_the_models_input() -> None:
    """The recogniser's cost grows with its input's width, and rapidocr pads every crop to 320 px: the
    first look gives each crop only its own width, which reads the same characters as the
    padded input did (a space can differ: "AYC\u2022EN" for "AYC\u2022 EN"; the parsers allow for both), and a
    short crop costs a short input."""
    import numpy as np
    from rapidocr.ch_ppocr_rec import TextRecInput

    from stage_e_dagster.stage_c import text_model

    p = modern(4)
    card = np.asarray(render_card(p, Variant(height=900), noise_seed=5).convert("RGB"))[:, :, ::-1]
    h, w = card.shape[:2]
    crops = [np.ascontiguousarray(card[y:y + 40, x0:x1]) for y, x0, x1 in
             ((int(h * 0.045), int(w * 0.08), int(w * 0.6)), (int(h * 0.56), int(w * 0.08), int(w * 0.4)),
              (int(h * 0.66), int(w * 0.08), int(w * 0.92)), (int(h * 0.93), int(w * 0.05), int(w * 0.3)))]
    own = text_model.recognise(crops)
    padded = [text_model.models().rec(TextRecInput(img=[crop])).txts[0] for crop in crops]
    assert [r.text.replace(" ", "") for r in own] == [text.replace(" ", "") for text in padded]
    assert sum(1 for r in own if r.text) >= 3
    short = crops[3]
    tensor, _ = text_model._input(text_model.models().rec, short, text_model.REC_MIN_WIDTH)
    assert tensor.shape[2:] == (48, int(48 * short.shape[1] / short.shape[0])) and tensor.shape[3] < 320
    careful, _ = text_model._input(text_model.models().rec, short, text_model.MODEL_WIDTH)
    assert careful.shape[3] == 320  # the closer look pads as the model was trained
    padded_too = text_model.recognise(crops, padded=True)
    assert [r.text for r in padded_too] == padded


def test_an_upright_card_is_read_without_asking_the_direction_classifier(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a card the localiser found, lines gathered in its lower half say it is upright: the classifier
    is asked only when they do not (a card turned over still reads, test above)."""
    from stage_e_dagster.stage_c import text_model

    asked: list[int] = []
    real = text_model.upside_down
    monkeypatch.setattr(text_model, "upside_down", lambda crops: asked.append(len(crops)) or real(crops))
    p = modern(2)
    photo = on_a_table(render_card(p, Variant(height=900), noise_seed=4), 0)
    fields = compute_evidence("h", png(photo), latency_ms=1.0, lexicon=LEXICON).fields
    assert fields["localisation_method"] == "contour"
    assert (fields["collector_number"], fields["collector_set_code"]) == (p.collector_number, p.set_code.lower())
    assert asked == []


def test_the_copies_the_models_get_are_cut_from_the_rgb_upload_as_from_a_bgr_one_bit_for_bit() -> None:
    """Issue 39: the upload stays RGB and only the copies the models read are turned to BGR, once they are
    scaled or cut. Each channel is scaled and warped alone, so they are the arrays the reader made when it
    turned the whole upload first: what a function gives a channel-swapped upload, swapped back."""
    rgb = np.asarray(on_a_table(render_card(modern(2), Variant(height=700), noise_seed=2), 0))
    swapped = np.ascontiguousarray(rgb[:, :, ::-1])
    for side in (300, 640, 960, 2 * max(rgb.shape)):  # made smaller, kept, enlarged
        ours, scale = text_reader._resized(rgb, side)
        theirs, same_scale = text_reader._resized(swapped, side)
        assert scale == same_scale and np.array_equal(ours, theirs[:, :, ::-1]), side
    frame = text_reader._Frame(*text_reader._frame(7.0))
    ours, _ = text_reader._band(rgb, frame, 500.0, 640.0, 40.0, 520.0, text_reader.CARD_CLOSE_SIDE)
    theirs, _ = text_reader._band(swapped, frame, 500.0, 640.0, 40.0, 520.0, text_reader.CARD_CLOSE_SIDE)
    assert np.array_equal(ours, theirs[:, :, ::-1])
    corners = np.array([[60, 600], [420, 620], [418, 650], [58, 630]], dtype=np.float32)
    assert np.array_equal(text_reader._bgr(text_reader._crop(rgb, corners)),
                          text_reader._crop(swapped, corners))
    red = np.zeros((300, 200, 3), dtype=np.uint8)
    red[:, :, 0] = 255  # red in RGB: the models' copies hold it in their last channel
    for copy in (text_reader._resized(red, 100)[0], text_reader._resized(red, 200)[0],
                 text_reader._band(red, frame, 20.0, 80.0, 10.0, 150.0, 600)[0]):
        assert (copy.reshape(-1, 3) == (0, 0, 255)).all()


def test_a_tall_band_is_detected_in_parts_no_larger_than_the_first_looks_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: the detector's memory grows with the pixels it is given, so no part of a closer look's band
    is larger than the first look's copy (BAND_PART_PIXELS): a band too tall for two parts of that size to
    overlap by a third of a part is cut in three (a 1473 x 908 band was cut in two of 803 kpx and took a
    worker's peak over 400 MB). A band that two such parts cover is cut as before, and every line found in
    the whole band is found once in its parts."""
    from stage_e_dagster.stage_c import text_model

    card = render_card(modern(5), Variant(height=2060), noise_seed=3).convert("RGB")
    card = card.resize((1473, round(card.height * 1473 / card.width)))
    band = np.ascontiguousarray(np.asarray(card)[card.height - 960:card.height - 52, :, ::-1])  # 1473 x 908
    whole = text_model.detect(band)
    parts: list[tuple[int, int]] = []
    real = text_model.detect
    monkeypatch.setattr(text_model, "detect", lambda part: parts.append(part.shape[:2]) or real(part))
    found = text_reader._detect_in_parts(band)
    assert len(parts) == 3 and all(h * w <= text_reader.BAND_PART_PIXELS for h, w in parts)
    assert len(whole) >= 4 and all(any(text_reader._same_line(box, kept) for kept in found) for box in whole)
    assert not any(text_reader._same_line(a, b) for i, a in enumerate(found) for b in found[i + 1:])

    parts.clear()
    text_reader._detect_in_parts(np.ascontiguousarray(band[:700, :1000]))  # 700 kpx: two parts of 691 rows
    assert parts == [(691, 1000), (691, 1000)]


@pytest.mark.skipif(not (REAL_PHOTOS_2 / "labels.csv").is_file(),
                    reason=f"real photos not present at {REAL_PHOTOS_2} (evaluation input kept outside the project)")
def test_the_last_resort_across_a_card_reads_only_its_collector_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: the last resort's band across a known card holds rules text above the collector end (12
    lines on roe-137, a 2010 card whose number ends its legal line); only the band's last COLLECTOR_ROWS
    rows are recognised, which hold the number: the rules text is the first look's and settles nothing."""
    looks: list[tuple[list[str], int]] = []
    real = text_reader._read_crops

    def read_crops(crops, boxes, *, careful=False):  # type: ignore[no-untyped-def]
        lines = real(crops, boxes, careful=careful)
        looks.append(([ln.text for ln in lines], len(text_reader._rows_of([b for b, _ in boxes]))))
        return lines

    monkeypatch.setattr(text_reader, "_read_crops", read_crops)
    data = (REAL_PHOTOS_2 / "roe-137_brimstone-mage.jpg").read_bytes()
    result = compute_evidence("h", data, latency_ms=1.0, lexicon=frozenset({"roe"}))
    assert result.fields["collector_number"] == "137"
    texts, rows = looks[-1]
    assert 1 <= rows <= text_reader.COLLECTOR_ROWS and any("137" in t for t in texts), looks


def _looks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each closer look the reader takes from now on: "narrow" (the card's band) or "wide" (the last resort)."""
    looks: list[str] = []
    for name, look in (("_closer_on_card", "narrow"), ("_closer_on_text_region", "wide")):
        real = getattr(text_reader, name)
        monkeypatch.setattr(text_reader, name, lambda *args, _real=real, _look=look, **kwargs:
                            looks.append(_look) or _real(*args, **kwargs))
    return looks


def test_a_legal_line_two_looks_read_alike_takes_no_last_resort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: a render of an old-style card from 1998 or later that prints no number reads its legal
    line in the first look and again in the narrow band, the same letters ending in the same place; the
    last resort, a wider look at the same rows, found nothing there and cost each such card as much as the
    two looks before it (a ninth of the seed corpus, 40 % of its reader CPU)."""
    looks = _looks(monkeypatch)
    p = next(p for p in SPECS if p.style == "old" and p.released.year >= 1998)
    fields = compute_evidence("h", png(render_card(p, Variant(height=1040), noise_seed=1)), latency_ms=1.0,
                              lexicon=LEXICON).fields
    assert fields["copyright_year"] == p.released.year and fields.get("collector_number") is None
    assert looks == ["narrow"]


def test_the_last_resort_is_for_a_legal_line_the_looks_read_differently() -> None:
    """The rule's edges: the legal line compared by its letters and digits only; a first look that missed
    the legal line (roe-137: the narrow band read it, the last resort read its number) or read it otherwise
    leaves the last resort to be taken."""
    def line(text: str, end: str = "collector", top: float = 900.0) -> text_reader.TextLine:
        return text_reader.TextLine(text, 0.9, 100.0, top, 300.0, 12.0, end)

    credit = line("Illus. Mira Moreau", top=880.0)
    assert text_reader._same_legal_line([credit, line("\u00a9 1999 Wizards of the Coast")],
                                        [line("\u00a91999 Wizards of the Coast.")])
    assert not text_reader._same_legal_line([credit], [credit, line("1993-2010 Wizards of the Coast LLC")])
    assert not text_reader._same_legal_line([line("\u00a9 1999 Wizards of the Coast")],
                                            [line("\u00a9 1998 Wizards of the Coast")])
    assert not text_reader._same_legal_line([line("\u00a9 2010 Wizards of the Coast LLC")],
                                            [line("\u00a9 2010 Wizards of the Coast LLC 137/249")])
    assert not text_reader._same_legal_line([line("\u00a9 1999 Wizards", end="title")], [line("\u00a9 1999 Wizards")])


def test_without_the_last_resort_each_line_is_kept_as_the_surer_look_read_it() -> None:
    """With no wider look, a line the first look and the narrow band both read is kept as the look surer of
    it read it: the band's enlarged credit read "Ittus. Sven Adter" (0.85) where the first look had "Illus.
    Sven Adler" (0.999), and four seed renders lost their artist. A line read whole by one look and in two
    boxes by the other is kept once; a line only one look read is kept as it is."""
    def line(text: str, score: float, left: float, width: float, top: float = 900.0) -> text_reader.TextLine:
        return text_reader.TextLine(text, score, left, top, width, 12.0, "collector")

    legal = line("\u00a9 1999 Wizards of the Coast", 0.98, 240.0, 260.0, top=920.0)
    first = [line("Illus. Sven Adler", 0.999, 290.0, 160.0),
             line("\u00a9 1999 Wizards of the Coast", 0.95, 240.0, 262.0, top=920.0)]
    band = [line("Ittus.", 0.85, 290.0, 40.0), line("Sven Adter", 0.80, 335.0, 115.0), legal]
    assert text_reader._surer(band, first) == [first[0], legal]
    assert text_reader._surer(band, []) == band


def _reads_on_card(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each read of a card's text Stage C makes from now on, as whether it read on the card (False: the upload)."""
    from stage_e_dagster.stage_c import extractors

    reads: list[bool] = []
    real = extractors.read_card_text
    monkeypatch.setattr(extractors, "read_card_text",
                        lambda *args, **kwargs: reads.append(kwargs.get("on_card", False)) or real(*args, **kwargs))
    return reads


def test_a_render_read_to_its_legal_line_is_not_read_again_as_an_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: an upload taken whole for its card's aspect is read on the card, and again as an upload
    when that settles nothing, for a photo that only has a card's aspect. A read that reached the legal
    line, at the card's foot, saw the whole card: a render of an old-style 2002 card, which prints no
    number, is read once (the read as an upload cost four more detections and found nothing; a ninth of
    the seed corpus is such cards)."""
    reads = _reads_on_card(monkeypatch)
    p = next(p for p in SPECS if p.style == "old" and p.released.year >= 1998)
    fields = compute_evidence("h", png(render_card(p, Variant(height=1040), noise_seed=1)), latency_ms=1.0,
                              lexicon=LEXICON).fields
    assert fields["localisation_method"] == "whole-image" and fields["copyright_year"] == p.released.year
    assert fields.get("collector_number") is None and reads == [True]


@pytest.mark.skipif(not (REAL_PHOTOS_2 / "labels.csv").is_file(),
                    reason=f"real photos not present at {REAL_PHOTOS_2} (evaluation input kept outside the project)")
def test_a_photo_with_a_cards_aspect_is_read_again_as_an_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: a sleeved card photographed to fill the frame is taken whole, the read on it finds
    only the title (no legal line), and the read as an upload finds the number."""
    reads = _reads_on_card(monkeypatch)
    bands = _card_bands_read(monkeypatch)
    data = (REAL_PHOTOS_2 / "mh2-186_foil_asmoranomardicadaistinaculdacar_sleeved.jpg").read_bytes()
    fields = compute_evidence("h", data, latency_ms=1.0, lexicon=frozenset({"mh2"})).fields
    assert fields["localisation_method"] == "whole-image" and reads == [True, False]
    assert fields["collector_number"] == "186"
    # The first look on the card found one line: its bands, cut blind at the card's foot, are not read.
    assert bands == []


def _card_bands_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each closer look on a card's own bands from now on (its text's rows found by the first look)."""
    bands: list[int] = []
    real = text_reader._closer_on_card
    monkeypatch.setattr(text_reader, "_closer_on_card",
                        lambda upload, frame, rows, *args: bands.append(len(rows)) or real(upload, frame, rows, *args))
    return bands


def a_card_shaped_frame_with_one_line() -> Image.Image:
    """An upload with a card's aspect that shows one line of text and nothing else."""
    frame = Image.new("RGB", (630, 880), (236, 232, 220))
    ImageDraw.Draw(frame).text((60, 400), "Goblin Token", fill=(20, 20, 20), font_size=56)
    return frame


def test_a_first_look_with_almost_no_text_leaves_the_card_to_the_read_as_an_upload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: on an upload taken whole for its aspect, a first look on the card that found fewer than
    CARD_MIN_LINES lines has not found the card's text, and the read as an upload follows: the card's bands
    are not read first. Any other read on a card still looks closer when the first look settles nothing."""
    bands = _card_bands_read(monkeypatch)
    image = a_card_shaped_frame_with_one_line()
    alone = text_reader.read_card_text(image, on_card=True, upload_next=True)
    assert 0 < alone.detected < text_reader.CARD_MIN_LINES and alone.passes == ("ends",) and bands == []
    closer = text_reader.read_card_text(image, on_card=True)
    assert closer.passes == ("ends", "close") and len(bands) == 1


def test_the_card_with_its_margin_is_read_as_an_array_as_its_image_would_be() -> None:
    """The reader takes the card with its margin as the RGB array the warp made (a Pillow image of it was one
    more copy of the card held while the detector took its buffers): the same pixels read the same."""
    p = modern(3)
    photo = on_a_table(render_card(p, Variant(height=900), noise_seed=6), 0)
    found = localise_card(photo)
    card = card_with_margin(photo, found, text_reader.CARD_MARGIN, text_reader.CARD_MIN_SIDE)
    assert isinstance(card, np.ndarray) and card.dtype == np.uint8 and card.shape[2] == 3
    from_array = text_reader.read_card_text(card, on_card=True)
    from_image = text_reader.read_card_text(Image.fromarray(card), on_card=True)
    assert from_array.lines and from_array == from_image
