"""Safe machine votes (issue 11) through run_stage_d on a real catalogue: weak or repaired readings and
unsure border readings never turn into a vote that could be wrong; such cards go to review."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Expansion, PrintingVote, ScanLog
from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.facts import complete_set_codes
from stage_e_dagster.stage_d.run import run_stage_d

from .builders import CatalogueBuilder


def outcomes(engine: sa.Engine, card_id: int) -> tuple[list[tuple], list[str]]:
    with engine.connect() as conn:
        votes = conn.execute(sa.select(PrintingVote.agent_id, PrintingVote.printing_id, PrintingVote.is_no_match)
                             .where(PrintingVote.card_id == card_id)).all()
        reasons = conn.execute(sa.select(ScanLog.reason).where(ScanLog.card_id == card_id,
                                                               ScanLog.agent_id == A.JOIN_KEY_AGENT)).scalars()
        return sorted(votes), list(reasons)


def test_weak_or_repaired_readings_go_to_review(engine: sa.Engine) -> None:
    b = CatalogueBuilder(engine)
    frf = b.printing("Lightning Shrieker", "frf", "106")
    b.printing("Lightning Shrieker", "chk", "180", border="black")   # decoy: the same name in another set
    b.expansion("den")
    b.expansion("jfn")
    cards = {
        # "FRF" once read as language FR plus nothing; now a clean read that votes.
        "clean": b.card("Lightning Shrieker", evidence=dict(
            collector_set_code="frf", collector_number="106", collector_language="en",
            collector_line_raw_text="106/185 C\nFRF * EN te SLAWOMIR MANIAK")),
        # A junk line from the frame edge repaired into a real set code, with a bare number.
        "junk": b.card("Lightning Shrieker", evidence=dict(
            collector_set_code="jfn", collector_number="6", collector_line_raw_text="SATU Tene 6 WA\nJEN EN")),
        # A real code read as printed in a set without the name, but the set may be imported in part.
        "den": b.card("Lightning Shrieker", evidence=dict(collector_set_code="den", collector_number="12")),
        # The border was read off a top-loader: the reading disagrees but is not confident.
        "sleeve": b.card("Lightning Shrieker", evidence=dict(
            collector_set_code="frf", collector_number="106", layout_class="white", layout_confidence=0.1)),
        # A confident border reading that disagrees is still a veto.
        "white": b.card("Lightning Shrieker", evidence=dict(
            collector_set_code="frf", collector_number="106", layout_class="white", layout_confidence=0.95)),
    }
    run_stage_d(engine, None, run_id="safe")

    assert outcomes(engine, cards["clean"]) == ([(A.JOIN_KEY_AGENT, frf, False)], [])
    assert outcomes(engine, cards["sleeve"]) == ([(A.JOIN_KEY_AGENT, frf, False)], [])
    assert outcomes(engine, cards["junk"]) == ([], [A.WEAK_READING])
    assert outcomes(engine, cards["den"]) == ([], [A.SET_NOT_COMPLETE])
    assert outcomes(engine, cards["white"]) == ([], [A.BORDER_MISMATCH])
    with engine.connect() as conn:
        routed = set(conn.execute(sa.select(ScanLog.card_id).where(ScanLog.reason == A.OUTCOME_TO_REVIEW)).scalars())
        no_match_votes = conn.execute(sa.select(sa.func.count()).select_from(PrintingVote)
                                      .where(PrintingVote.is_no_match.is_(True))).scalar_one()
    assert routed == {cards["junk"], cards["den"], cards["white"]}
    assert no_match_votes == 0


def test_complete_sets_need_the_card_count(engine: sa.Engine) -> None:
    """A set is complete only when its printings reach the set's card count; a set without a stored
    count (imported without Scryfall's sets data) never is, so no no-match vote is cast in it."""
    b = CatalogueBuilder(engine)
    for number in ("1", "2", "3"):
        b.printing(f"Card {number}", "m10", number)
    b.printing("Card 9", "dmu", "9")
    b.printing("Card 5", "lea", "5")
    with Session(engine) as session, session.begin():
        session.execute(sa.update(Expansion).where(Expansion.code == "m10").values(card_count=3))
        session.execute(sa.update(Expansion).where(Expansion.code == "dmu").values(card_count=281))
        assert complete_set_codes(session, {"m10", "dmu", "lea", "zzz"}) == frozenset({"m10"})
        assert complete_set_codes(session, set()) == frozenset()


def test_a_confirmed_read_in_a_complete_set_without_the_name_casts_a_no_match_vote(engine: sa.Engine) -> None:
    b = CatalogueBuilder(engine)
    for number in ("106", "107"):
        b.printing(f"Other {number}", "frf", number)
    b.printing("Lightning Shrieker", "chk", "180")
    with Session(engine) as session, session.begin():
        session.execute(sa.update(Expansion).where(Expansion.code == "frf").values(card_count=2))
    line = "106/185 C\nFRF * EN SLAWOMIR MANIAK"
    boxes = [{"text": "FRF", "left": 0, "top": 20, "width": 40, "height": 12, "conf": 96.0}]
    confirmed = b.card("Lightning Shrieker", evidence=dict(
        collector_set_code="frf", collector_number="106", collector_line_raw_text=line, collector_word_boxes=boxes))
    unsure = b.card("Lightning Shrieker", evidence=dict(
        collector_set_code="frf", collector_number="106", collector_line_raw_text=line,
        collector_word_boxes=[{**boxes[0], "conf": 61.0}]))
    run_stage_d(engine, None, run_id="no-match")
    assert outcomes(engine, confirmed) == ([(A.JOIN_KEY_AGENT, None, True)], [])
    assert outcomes(engine, unsure) == ([], [A.SET_CODE_UNCONFIRMED])
