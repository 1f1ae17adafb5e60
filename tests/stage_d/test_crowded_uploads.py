"""A photo of several cards, or of a card in a graded slab, is an abstention with its reason (issue 20).

The real Stage C (localisation, Tesseract) and Stage D run on rendered photos whose cards read
cleanly: two printings of the card's name side by side on a table, and one printing in a slab
with a grading label. Without the check, the join key voted for whichever card the localiser
found first. The eight real photos (six in top-loaders) stay ordinary ``contour`` finds.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from PIL import Image, ImageDraw

from stage_e_dagster.catalog.models import ImageEvidence, PrintingVote, ScanLog
from stage_e_dagster.corpus.catalogue import PrintingSpec
from stage_e_dagster.corpus.render import Variant, render_face
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.localise import localise_card
from stage_e_dagster.stage_c.run import run_stage_c
from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.run import run_stage_d

from .builders import CatalogueBuilder

NAME = "Broodhunter Wurm"
PHOTOS = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real-photos"


def face(code: str, number: str, height: int) -> Image.Image:
    spec = PrintingSpec(key=f"{code}-{number}", set_code=code, name=NAME, collector_number=number, lang="en",
                        rarity="C", artist="Svetlin Velinov", border_color="black", frame="2015", style="slash",
                        released=date(2022, 9, 9), set_size=281, art_seed=3)
    return render_face(spec, Variant(height=height))


def table(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    wood = np.zeros((height, width, 3)) + np.array([120.0, 96.0, 70.0]) + rng.normal(0, 6, (height, width, 1))
    return Image.fromarray(wood.clip(0, 255).astype(np.uint8))


def two_cards() -> Image.Image:
    photo = table(1500, 1000, 1)
    photo.paste(face("DMU", "41", 760), (120, 120))
    photo.paste(face("FDN", "41", 760), (820, 120))
    return photo


def graded_slab() -> Image.Image:
    photo = table(1000, 1500, 2)
    draw = ImageDraw.Draw(photo)
    draw.rounded_rectangle((180, 120, 820, 1380), radius=20, fill=(205, 210, 215), outline=(250, 250, 250), width=6)
    draw.rectangle((210, 150, 790, 390), fill=(245, 245, 240))
    draw.text((240, 200), "PSA 10 GEM MT  2022 DMU #041", fill=(200, 20, 20))
    photo.paste(face("DMU", "41", 820), (207, 430))
    return photo


def one_card() -> Image.Image:
    photo = table(1000, 1300, 3)
    photo.paste(face("DMU", "41", 1000), (140, 150))
    return photo


def test_the_localiser_names_several_cards_and_a_slab() -> None:
    assert localise_card(two_cards()).method == "several-cards"
    assert localise_card(graded_slab()).method == "graded-slab"
    assert localise_card(one_card()).method == "contour"


@pytest.mark.skipif(not PHOTOS.is_dir(), reason=f"real photos not present at {PHOTOS}")
def test_cards_in_top_loaders_are_not_taken_for_slabs() -> None:
    methods = {f.name: localise_card(Image.open(f).convert("RGB")).method for f in sorted(PHOTOS.glob("*.jpg"))}
    assert set(methods.values()) == {"contour"}, methods


def test_several_cards_or_a_slab_abstain_and_one_card_votes(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    b = CatalogueBuilder(sqlite_engine)
    dmu = b.printing(NAME, "dmu", "41")
    b.printing(NAME, "fdn", "41")
    photos = {"two": two_cards(), "slab": graded_slab(), "one": one_card()}
    cards = {}
    for key, photo in photos.items():
        path = tmp_path / f"{key}.png"
        photo.save(path)
        cards[key] = b.card(NAME, identifier=key)
        with sqlite_engine.begin() as conn:
            conn.execute(sa.text("UPDATE cards SET image_locator = :loc, content_hash = NULL, stage_c_pending = 1 "
                                 "WHERE id = :id"), {"loc": path.as_uri(), "id": cards[key]})
    ids = sorted(cards.values())
    with ImageFetcher(engine=sqlite_engine, image_roots=[tmp_path], allowed_hosts=[], timeout_s=5.0,
                      max_bytes=20_000_000, rate_per_sec=1000.0) as fetcher:
        report = run_stage_c(sqlite_engine, ids, writer="test:crowded", run_id="crowded", fetcher=fetcher)
    assert report.completed == len(ids), report
    run_stage_d(sqlite_engine, ids, run_id="crowded")

    with sqlite_engine.connect() as conn:
        votes = dict(conn.execute(sa.select(PrintingVote.card_id, PrintingVote.printing_id)).all())
        reasons = {cid: set() for cid in ids}
        for cid, reason in conn.execute(sa.select(ScanLog.card_id, ScanLog.reason)
                                        .where(ScanLog.agent_id == A.JOIN_KEY_AGENT)):
            reasons[cid].add(reason)
        read = dict(conn.execute(sa.select(ImageEvidence.card_id, ImageEvidence.collector_number)).all())
    assert votes == {cards["one"]: dmu}
    assert reasons[cards["two"]] == {A.SEVERAL_CARDS}
    assert reasons[cards["slab"]] == {A.GRADED_SLAB}
    # The cards in them were read (the evidence is kept); the reading is simply not voted on.
    assert read[cards["two"]] == "41" and read[cards["slab"]] == "41"
