"""run_stage_d against a real catalogue on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Card, PrintingVote, ScanLog, StageDPass
from stage_e_dagster.stage_d import agents as A
from stage_e_dagster.stage_d.human import cast_human_vote
from stage_e_dagster.stage_d.run import run_stage_d

from .builders import CatalogueBuilder, make_evidence

ART = 0x0F0F_0F0F_0F0F_0F0F


def votes(engine: sa.Engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(
            PrintingVote.card_id, PrintingVote.agent_id, PrintingVote.printing_id, PrintingVote.is_no_match,
            PrintingVote.source)).all())


def reasons(engine: sa.Engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(ScanLog.card_id, ScanLog.agent_id, ScanLog.reason)).all())


def card_state(engine: sa.Engine, card_id: int) -> tuple:
    with engine.connect() as conn:
        return tuple(conn.execute(sa.select(Card.printing_status, Card.inferred_printing_id, Card.stage_d_pending)
                            .where(Card.id == card_id)).one())


def build_scene(engine: sa.Engine) -> dict[str, int]:
    b = CatalogueBuilder(engine)
    ids = {
        "dmu": b.printing("Tithe Taker", "dmu", "41", art_phash=ART),
        "fdn": b.printing("Tithe Taker", "fdn", "41", art_phash=ART ^ 0xFFFF_FFFF),
        "old": b.printing("Old Wall", "lea", "12", frame="1993", art_phash=0x1234_5678_9ABC_DEF0),
    }
    b.expansion("m10")
    ids["match"] = b.card("Tithe Taker (1).png", evidence=dict(collector_set_code="dmu", collector_number="041"))
    # m10 holds no Tithe Taker, but the catalogue cannot say it holds all of m10: no no-match vote.
    ids["no_match"] = b.card("Tithe Taker", evidence=dict(collector_set_code="m10", collector_number="7"))
    ids["art"] = b.card("Old Wall", evidence=dict(illus_anchor_fired=True, art_phash=0x1234_5678_9ABC_DEF1))
    ids["review"] = b.card("Tithe Taker", evidence=dict(collector_set_code="zzz", collector_number="41"))
    ids["token"] = b.card("Tithe Taker", card_type="token",
                          evidence=dict(collector_set_code="dmu", collector_number="41"))
    ids["bare"] = b.card("Tithe Taker")  # no evidence yet
    return ids


def test_calculators_vote_abstain_and_route(engine: sa.Engine) -> None:
    ids = build_scene(engine)
    report = run_stage_d(engine, None, run_id="run-1")

    assert report.cards_considered == 4
    # The would-be no-match card is unplaced too: the fallback cannot place it either, so it goes to review.
    assert (report.join_key_votes, report.fallback_votes, report.slow_path_routed) == (1, 1, 2)
    assert report.abstentions == 7  # every scan-log row, the two review routes included
    assert report.consensus_changed == 0  # machine votes alone resolve nothing
    assert votes(engine) == sorted([
        (ids["match"], A.JOIN_KEY_AGENT, ids["dmu"], False, "ocr"),
        (ids["art"], A.FALLBACK_AGENT, ids["old"], False, "ocr"),
    ])
    assert reasons(engine) == sorted([
        (ids["art"], A.JOIN_KEY_AGENT, A.NO_TEXT),
        (ids["review"], A.JOIN_KEY_AGENT, A.UNKNOWN_SET_CODE),
        (ids["review"], A.FALLBACK_AGENT, A.NO_ART_HASH),
        (ids["review"], A.SLOW_PATH_AGENT, A.OUTCOME_TO_REVIEW),
        (ids["no_match"], A.JOIN_KEY_AGENT, A.SET_NOT_COMPLETE),
        (ids["no_match"], A.FALLBACK_AGENT, A.NO_ART_HASH),
        (ids["no_match"], A.SLOW_PATH_AGENT, A.OUTCOME_TO_REVIEW),
    ])
    with engine.connect() as conn:
        packet = conn.execute(sa.select(ScanLog.detail).where(
            ScanLog.reason == A.OUTCOME_TO_REVIEW, ScanLog.card_id == ids["review"])).scalar_one()
    assert packet["collector_set_code"] == "zzz" and packet["join_key"] == A.UNKNOWN_SET_CODE
    assert sorted(packet["candidate_printing_ids"]) == sorted([ids["dmu"], ids["fdn"]])
    for key in ("match", "no_match", "art", "review", "token"):
        assert card_state(engine, ids[key])[2] is False, key  # left the Stage D backlog
    assert all(s[0] == "unresolved" for s in (card_state(engine, ids[k]) for k in ids if k in ("match", "art")))


def test_rerun_writes_nothing(engine: sa.Engine) -> None:
    build_scene(engine)
    run_stage_d(engine, None, run_id="run-1")
    before = (votes(engine), reasons(engine))
    again = run_stage_d(engine, None, run_id="run-2")
    assert (again.join_key_votes, again.fallback_votes, again.slow_path_routed, again.abstentions) == (0, 0, 0, 0)
    assert (votes(engine), reasons(engine)) == before


def test_scoped_and_unscoped_runs_give_the_same_votes(engine: sa.Engine) -> None:
    ids = build_scene(engine)
    scope = [ids["match"], ids["art"], ids["review"]]
    run_stage_d(engine, scope, run_id="scoped")
    scoped_votes = [v for v in votes(engine)]
    scoped_reasons = reasons(engine)
    assert {v[0] for v in scoped_votes} <= set(scope)
    assert card_state(engine, ids["no_match"])[2] is True  # out of scope: untouched
    with engine.begin() as conn:
        for table in (PrintingVote, ScanLog, StageDPass):
            conn.execute(sa.delete(table))
    run_stage_d(engine, None, run_id="bulk")
    assert [v for v in votes(engine) if v[0] in scope] == scoped_votes
    assert [r for r in reasons(engine) if r[0] in scope] == scoped_reasons


def test_human_votes_resolve_with_machine_support(engine: sa.Engine) -> None:
    ids = build_scene(engine)
    run_stage_d(engine, None, run_id="run-1")
    assert cast_human_vote(engine, ids["match"], ids["dmu"], user="ann").status == "unresolved"  # 1 + 0.5
    outcome = cast_human_vote(engine, ids["match"], ids["dmu"], user="bob")
    assert (outcome.status, outcome.printing_id) == ("resolved", ids["dmu"])
    assert card_state(engine, ids["match"])[:2] == ("resolved", ids["dmu"])
    # bob changes his mind: his vote is replaced, not added
    assert cast_human_vote(engine, ids["match"], ids["fdn"], user="bob").status == "unresolved"
    assert sum(1 for v in votes(engine) if v[1] == "bob") == 1
    assert cast_human_vote(engine, ids["no_match"], None, user="root", admin=True).status == "no_match"
    assert card_state(engine, ids["no_match"])[:2] == ("no_match", None)


def test_byte_identical_cards_are_one_target(engine: sa.Engine) -> None:
    b = CatalogueBuilder(engine)
    dmu = b.printing("Tithe Taker", "dmu", "41")
    shared = "sha256:" + "ab" * 32
    first = b.card("Tithe Taker", content_hash=shared, evidence=dict(collector_set_code="dmu", collector_number="41"))
    second = b.card("Tithe Taker", content_hash=shared, evidence=dict(collector_set_code="dmu", collector_number="41"))
    run_stage_d(engine, [first, second], run_id="run-1")
    # The same engine voted on both uploads: pooled it weighs 0.5, so one user is not enough...
    assert cast_human_vote(engine, first, dmu, user="ann").status == "unresolved"
    # ...a second user on the other upload is, and the verdict lands on both.
    assert cast_human_vote(engine, second, dmu, user="bob").status == "resolved"
    assert card_state(engine, first)[:2] == card_state(engine, second)[:2] == ("resolved", dmu)


def test_new_image_replaces_the_engines_old_vote(engine: sa.Engine) -> None:
    b = CatalogueBuilder(engine)
    dmu = b.printing("Tithe Taker", "dmu", "41")
    fdn = b.printing("Tithe Taker", "fdn", "41")
    card = b.card("Tithe Taker", evidence=dict(collector_set_code="dmu", collector_number="41"))
    run_stage_d(engine, [card], run_id="run-1")
    with Session(engine) as s, s.begin():  # what Stage C does when the image changes
        row = s.get(Card, card)
        row.content_hash = "sha256:" + "cd" * 32
        row.stage_d_pending = True
        s.add(make_evidence(card, row.content_hash, collector_set_code="fdn", collector_number="41"))
    report = run_stage_d(engine, [card], run_id="run-2")
    assert report.join_key_votes == 1
    assert [(v[1], v[2]) for v in votes(engine)] == [(A.JOIN_KEY_AGENT, fdn)]
    assert dmu != fdn


def test_backlog_flag_survives_a_concurrent_change(engine: sa.Engine) -> None:
    """If a writer touches the card between Stage D's read and its clear, the card stays in the backlog."""
    from stage_e_dagster.stage_d import run as run_module

    b = CatalogueBuilder(engine)
    b.printing("Tithe Taker", "dmu", "41")
    card = b.card("Tithe Taker", evidence=dict(collector_set_code="dmu", collector_number="41"))
    with engine.connect() as conn:
        row = conn.execute(sa.select(Card.id, Card.stage_d_pending, Card.updated_at, Card.content_hash)
                           .where(Card.id == card)).one()
    with engine.begin() as conn:  # someone else writes the card after it was read
        conn.execute(sa.update(Card).where(Card.id == card).values(stage_d_pending=True))
    with Session(engine) as s, s.begin():
        run_module._clear_backlog_flags(s, [row])
    assert card_state(engine, card)[2] is True
    with engine.connect() as conn:
        fresh = conn.execute(sa.select(Card.id, Card.stage_d_pending, Card.updated_at, Card.content_hash)
                             .where(Card.id == card)).one()
    assert fresh.updated_at is not None and fresh.updated_at - (row.updated_at or fresh.updated_at) >= timedelta(0)
    with Session(engine) as s, s.begin():
        run_module._clear_backlog_flags(s, [fresh])
    assert card_state(engine, card)[2] is False


def _scoped_statements(engine: sa.Engine, extra_cards: int) -> tuple[int, int]:
    """Statements and bound values a 2-card scoped run issues in a catalogue padded with ``extra_cards``."""
    b = CatalogueBuilder(engine)
    b.printing("Tithe Taker", "dmu", "41")
    scope = [b.card("Tithe Taker", evidence=dict(collector_set_code="dmu", collector_number="41")),
             b.card("Tithe Taker", evidence=dict(collector_set_code="zzz", collector_number="41"))]
    for i in range(extra_cards):
        b.printing(f"Other {i}", "fdn", str(i + 1))
        b.card(f"Other {i}", evidence=dict(collector_set_code="fdn", collector_number=str(i + 1)))
    run_stage_d(engine, scope[:1], run_id="warm-index")  # the per-process name index is built once
    seen: list[int] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        seen.append(len(parameters) if isinstance(parameters, (list, tuple, dict)) else 0)

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        run_stage_d(engine, scope, run_id="scoped")
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    return len(seen), sum(seen)


def test_scoped_cost_follows_the_list_not_the_catalogue(sqlite_template, tmp_path) -> None:
    import shutil

    from stage_e_dagster.catalog.engine import make_engine
    from stage_e_dagster.stage_d.name_index import invalidate_name_index

    figures = []
    for name, extra in (("small", 5), ("big", 150)):
        path = tmp_path / f"{name}.sqlite"
        shutil.copy(sqlite_template, path)
        engine = make_engine(f"sqlite:///{path}")
        invalidate_name_index()
        figures.append(_scoped_statements(engine, extra_cards=extra))
        engine.dispose()
    assert figures[0] == figures[1]


def test_identical_non_image_bytes_do_not_pool(engine: sa.Engine) -> None:
    """Many uploads can fetch the same error page; those cards stay separate targets."""
    b = CatalogueBuilder(engine)
    dmu = b.printing("Tithe Taker", "dmu", "41")
    fdn = b.printing("Tithe Taker", "fdn", "41")
    page = "sha256:" + "ee" * 32
    first = b.card("Tithe Taker", content_hash=page, evidence=dict(terminal=True, fetch_ok=False))
    second = b.card("Tithe Taker", content_hash=page, evidence=dict(terminal=True, fetch_ok=False))
    for user in ("ann", "bob"):
        cast_human_vote(engine, first, dmu, user=user)
        cast_human_vote(engine, second, fdn, user=user)
    assert card_state(engine, first)[:2] == ("resolved", dmu)
    assert card_state(engine, second)[:2] == ("resolved", fdn)


def test_an_upload_by_its_printed_name_gets_the_printing_in_that_language(engine: sa.Engine) -> None:
    """No language read on the card: ``Blitzschlag`` is the German Lightning Bolt, ``Lightning Bolt``
    the English one, at the same set code and number (the name index keeps only the printed name's
    language where the slot has one, so the join key sees one candidate)."""
    b = CatalogueBuilder(engine)
    english = b.printing("Lightning Bolt", "m10", "146")
    german = b.printing("Lightning Bolt", "m10", "146", lang="de", printed_name="Blitzschlag")
    line = dict(collector_set_code="m10", collector_number="146", collector_language=None)
    by_german_name = b.card("Blitzschlag", evidence=line)
    by_english_name = b.card("Lightning Bolt", evidence=line)
    run_stage_d(engine, None, run_id="run-lang")
    assert [v for v in votes(engine) if v[1] == A.JOIN_KEY_AGENT] == [
        (by_german_name, A.JOIN_KEY_AGENT, german, False, "ocr"),
        (by_english_name, A.JOIN_KEY_AGENT, english, False, "ocr"),
    ]
