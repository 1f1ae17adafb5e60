"""Old frames placed by year, border and symbol among real printings (issue 41).

The catalogue is the real Scryfall records in ``tests/fixtures/scryfall`` (imported as ``stage-e catalog
import-scryfall`` does): Dark Ritual was printed in Alpha (1993, no symbol), Ice Age (1995) and
Planechase (2009, a modern frame); Ice Age printed three Forests. The uploads are rendered cards whose
type line ends in Keyrune's icon of the set (``tests/set_symbols.py``), read by the real Stage C and
placed by the real Stage D; no printing has an art hash, so what the card prints must do it alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card, Expansion, Printing, PrintingVote, ScanLog
from stage_e_dagster.catalog_import.scryfall import import_scryfall
from stage_e_dagster.catalog_import.set_symbols import store_symbol_folder
from stage_e_dagster.corpus.catalogue import PrintingSpec
from stage_e_dagster.corpus.render import Variant, paint_symbol, render_face
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.run import run_stage_c
from stage_e_dagster.stage_d.agents import FALLBACK_AGENT
from stage_e_dagster.stage_d.run import run_stage_d
from tests.set_symbols import SYMBOLS, keyrune_glyph, needs_symbols

SCRYFALL = Path(__file__).resolve().parents[1] / "fixtures" / "scryfall"


@dataclass(frozen=True)
class Upload:
    file: str
    name: str
    artist: str
    symbol: str
    bottom: bool  # the credit and the "(c) 1995" line legible; False: worn away, nothing to read there


UPLOADS = (
    Upload("ritual-1995.png", "Dark Ritual", "Justin Hampton", "ice", True),
    Upload("ritual-no-year.png", "Dark Ritual", "Justin Hampton", "ice", False),
    Upload("forest-1995.png", "Forest", "Pat Lewis", "ice", True),
)


def render(upload: Upload) -> object:
    spec = PrintingSpec(key=upload.file, set_code="ICE", name=upload.name, collector_number="1", lang="en",
                        rarity="C", artist=upload.artist, border_color="black", frame="1993", style="old",
                        released=date(1995, 6, 3), set_size=383, art_seed=11)
    face = render_face(spec, Variant(height=1100, jpeg_quality=None))
    if not upload.bottom:
        face.paste((18, 18, 20), (0, round(0.89 * face.height), face.width, face.height))
    return paint_symbol(face, keyrune_glyph(upload.symbol, round(0.042 * face.height)))


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], list[dict], str | None, dict]]:
    """Per upload: the printings voted for ("set/number"), their details, and the fallback's outcome."""
    folder = tmp_path_factory.mktemp("old-frames")
    engine = make_engine(f"sqlite:///{folder / 'catalog.sqlite'}")
    upgrade(engine)
    import_scryfall(engine, SCRYFALL / "cards.json", sets_path=SCRYFALL / "sets.json")
    assert store_symbol_folder(engine, SYMBOLS)["ice"] == "stored"
    ids = {}
    for upload in UPLOADS:
        render(upload).save(folder / upload.file)  # type: ignore[attr-defined]
        with engine.begin() as conn:
            ids[upload.file] = conn.execute(sa.insert(Card).values(
                identifier=upload.file, name=upload.name, image_locator=(folder / upload.file).as_uri(),
            ).returning(Card.id)).scalar_one()
    with ImageFetcher(engine=engine, image_roots=[folder], allowed_hosts=[], timeout_s=10.0,
                      max_bytes=50_000_000, rate_per_sec=1000.0) as fetcher:
        run_stage_c(engine, sorted(ids.values()), writer="test", run_id="old-frames", fetcher=fetcher)
    run_stage_d(engine, sorted(ids.values()), run_id="old-frames")
    out = {}
    with Session(engine) as session:
        where = dict(session.execute(sa.select(Printing.id, Expansion.code + "/" + Printing.collector_number)
                                     .join(Expansion, Expansion.id == Printing.expansion_id)).all())
        for file, cid in ids.items():
            votes = session.execute(sa.select(PrintingVote.printing_id, PrintingVote.detail)
                                    .where(PrintingVote.card_id == cid, PrintingVote.source == "ocr")).all()
            log = session.execute(sa.select(ScanLog.reason, ScanLog.detail)
                                  .where(ScanLog.card_id == cid, ScanLog.agent_id == FALLBACK_AGENT)).first()
            out[file] = ([where[pid] for pid, _ in votes], [d or {} for _, d in votes],
                         log[0] if log else None, (log[1] or {}) if log else {})
    engine.dispose()
    return out


@needs_symbols
def test_the_legal_line_s_year_and_the_symbol_place_an_ice_age_card(placed) -> None:
    votes, details, _, _ = placed["ritual-1995.png"]
    assert votes == ["ice/120"]
    assert {"legal-year", "symbol"} <= set(details[0]["readings"])


@needs_symbols
def test_the_symbol_alone_places_it_when_the_year_is_not_read(placed) -> None:
    """Alpha prints no symbol and Planechase's is another: Ice Age's snowflake leaves one printing."""
    votes, details, _, _ = placed["ritual-no-year.png"]
    assert votes == ["ice/120"]
    assert "symbol" in details[0]["readings"] and "legal-year" not in details[0]["readings"]


@needs_symbols
def test_three_printings_of_one_set_and_year_are_named_not_guessed(placed) -> None:
    votes, _, reason, detail = placed["forest-1995.png"]
    assert votes == []
    assert reason == "ambiguous"
    assert detail["fitting_printings"] == ["ice/380", "ice/381", "ice/382"]
