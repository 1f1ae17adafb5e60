"""An old-frame card (no collector number) whose name has several printings, placed by its art.

The whole production path with real images: printings imported with art crop URLs, their art
hashes fetched by ``hash_art`` from a local HTTP server serving art crops the corpus renders, an
upload rendered by the corpus as an old-frame card with one printing's art, Stage C with real
localisation and Tesseract, then Stage D. The fallback votes when one printing stands apart and
abstains when two printings share the art (as Revised and Fourth Edition Plague Rats do).
"""

from __future__ import annotations

import json
import uuid
from datetime import date
from pathlib import Path

import sqlalchemy as sa

from stage_e_dagster.catalog.models import Card, Printing, PrintingVote, ScanLog, StageDPass
from stage_e_dagster.catalog_import.art_hashes import hash_art
from stage_e_dagster.catalog_import.scryfall import import_scryfall
from stage_e_dagster.corpus.catalogue import PrintingSpec
from stage_e_dagster.corpus.render import Variant, encode, render_card
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.run import run_stage_c
from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.fallback import ART_MARGIN, ART_MAX_DISTANCE
from stage_e_dagster.stage_d.run import run_stage_d

from .art_server import ArtServer, art_jpeg

NAME, ARTIST = "Plague Rats", "Anson Maddocks"
SETS = (("3ed", "1994-04-01"), ("4ed", "1995-04-01"), ("chr", "1995-07-01"))


def import_printings(engine: sa.Engine, tmp_path: Path, srv: ArtServer, art_seeds: tuple[int, ...]) -> dict[str, int]:
    """One printing of NAME per set, white-bordered 1993 frame, with its art crop served by ``srv``."""
    records = []
    for (code, released), seed in zip(SETS, art_seeds):
        srv.images[f"/art_crop/{code}.jpg"] = art_jpeg(seed)
        records.append({"object": "card", "id": str(uuid.uuid4()), "set": code, "collector_number": "123",
                        "name": NAME, "lang": "en", "layout": "normal", "artist": ARTIST, "border_color": "white",
                        "frame": "1993", "released_at": released,
                        "image_uris": {"art_crop": srv.url(f"/art_crop/{code}.jpg?1")}})
    path = tmp_path / "cards.json"
    path.write_text(json.dumps(records))
    import_scryfall(engine, path)
    with engine.connect() as conn:
        return {code: pid for pid, code in conn.execute(
            sa.text("SELECT p.id, e.code FROM printings p JOIN expansions e ON e.id = p.expansion_id")).all()}


def upload(engine: sa.Engine, tmp_path: Path, art_seed: int) -> int:
    """A photo-sized JPEG of an old-frame NAME card showing ``art_seed``'s art, as a card row."""
    spec = PrintingSpec(key="upload", set_code="3ED", name=NAME, collector_number="123", lang="en", rarity="C",
                        artist=ARTIST, border_color="white", frame="1993", style="old", released=date(1994, 4, 1),
                        set_size=306, art_seed=art_seed)
    variant = Variant(height=1000, blur=0.6, noise=3.0, jpeg_quality=80)
    path = tmp_path / "uploads" / "plague-rats.jpg"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(encode(render_card(spec, variant, noise_seed=7), variant))
    with engine.begin() as conn:
        conn.execute(sa.insert(Card).values(identifier="upload-1", name=NAME, image_locator=path.as_uri(),
                                            card_type="card", dpi=300))
        return conn.execute(sa.select(Card.id).where(Card.identifier == "upload-1")).scalar_one()


def run_stages(engine: sa.Engine, tmp_path: Path, srv: ArtServer) -> None:
    with ImageFetcher(engine=engine, image_roots=[tmp_path / "uploads"], allowed_hosts=[srv.host], timeout_s=10,
                      max_bytes=25 << 20, rate_per_sec=100) as fetcher:
        report = hash_art(engine, fetcher)
        assert (report.hashed, report.stopped) == (len(SETS), None)
        run_stage_c(engine, None, writer="bulk:test", run_id="test-c", fetcher=fetcher)
    run_stage_d(engine, None, run_id="test-d")


def outcomes(engine: sa.Engine, card_id: int) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(StageDPass.agent_id, StageDPass.outcome)
                                 .where(StageDPass.card_id == card_id)).all())


def test_an_old_frame_card_is_placed_by_art_among_its_names_printings(sqlite_engine: sa.Engine, tmp_path: Path,
                                                                       server: ArtServer) -> None:
    ids = import_printings(sqlite_engine, tmp_path, server, art_seeds=(101, 202, 303))
    card = upload(sqlite_engine, tmp_path, art_seed=202)
    run_stages(sqlite_engine, tmp_path, server)

    seen = outcomes(sqlite_engine, card)
    assert seen[A.JOIN_KEY_AGENT] in A.JOIN_KEY_UNPLACED  # no collector number on an old frame
    assert seen[A.FALLBACK_AGENT] == A.OUTCOME_VOTE
    with sqlite_engine.connect() as conn:
        votes = conn.execute(sa.select(PrintingVote.agent_id, PrintingVote.printing_id, PrintingVote.detail)
                             .where(PrintingVote.card_id == card)).all()
    assert [(agent, pid) for agent, pid, _ in votes] == [(A.FALLBACK_AGENT, ids["4ed"])]
    detail = votes[0][2]
    print("fallback vote detail:", detail)
    distances = detail["distances"]
    assert detail["nearest_printings"][0] == ids["4ed"] and len(distances) == 3
    assert distances[0] <= ART_MAX_DISTANCE and distances[1] - distances[0] >= ART_MARGIN


def test_two_printings_with_the_same_art_are_too_close_and_the_fallback_abstains(
    sqlite_engine: sa.Engine, tmp_path: Path, server: ArtServer
) -> None:
    ids = import_printings(sqlite_engine, tmp_path, server, art_seeds=(202, 202, 303))
    card = upload(sqlite_engine, tmp_path, art_seed=202)
    run_stages(sqlite_engine, tmp_path, server)

    assert outcomes(sqlite_engine, card)[A.FALLBACK_AGENT] == A.AMBIGUOUS
    with sqlite_engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(PrintingVote)
                            .where(PrintingVote.card_id == card)).scalar_one() == 0
        detail = conn.execute(sa.select(ScanLog.detail).where(
            ScanLog.card_id == card, ScanLog.agent_id == A.FALLBACK_AGENT)).scalar_one()
        hashes = dict(conn.execute(sa.select(Printing.id, Printing.art_phash)).all())
    print("fallback abstention detail:", detail)
    assert hashes[ids["3ed"]] == hashes[ids["4ed"]]
    assert set(detail["nearest_printings"][:2]) == {ids["3ed"], ids["4ed"]}
    assert detail["distances"][1] - detail["distances"][0] < ART_MARGIN
