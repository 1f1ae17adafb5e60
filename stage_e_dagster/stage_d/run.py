"""Stage D over a scope of cards: join key, then fallback, then slow path, then consensus.

Each chunk of cards is one transaction, so the three calculators see each other's writes and a
crash leaves either a whole chunk or nothing. Before a calculator writes for a card it claims a
pass marker (card, agent, content hash); only the run that wins the claim writes, which keeps
re-runs silent and concurrent runs free of duplicates. Every sub-query is scoped by the chunk's
card ids (or by the candidates of those cards), so the cost follows the scope, not the catalogue.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Callable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.evidence_facts import current_evidence
from ..catalog.models import Card, PrintingVote, ScanLog, StageDPass
from . import agents as A
from .consensus import recompute_consensus
from .decision import Decision
from .facts import complete_set_codes, load_printing_facts
from .fallback import decide_fallback
from .join_key import decide_join_key
from .name_index import NameIndex, get_name_index
from .slow_path import review_packet
from .writes import insert_ignore

log = logging.getLogger(__name__)

CHUNK_SIZE = 500
MAX_ATTEMPTS = 4
_RETRYABLE_PGCODES = frozenset({"40P01", "40001"})  # deadlock detected, serialization failure


@dataclass
class StageDReport:
    cards_considered: int = 0
    join_key_votes: int = 0        # printing + no-match votes newly written by the join-key calculator
    fallback_votes: int = 0
    slow_path_routed: int = 0
    abstentions: int = 0           # scan-log rows written (abstentions and review routes)
    consensus_changed: int = 0     # cards whose printing_status or inferred printing changed

    def add(self, other: "StageDReport") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def run_stage_d(
    engine: sa.Engine,
    card_ids: Sequence[int] | None,
    *,
    run_id: str,
    chunk_size: int = CHUNK_SIZE,
    progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> StageDReport:
    """Run the three calculators over ``card_ids`` (None: every card, keyset-paged) and recompute consensus.

    Cards in scope that have been through Stage D on their current evidence, or are not eligible
    for machine votes, leave the Stage D backlog (``stage_d_pending`` is cleared unless the card
    changed meanwhile). ``progress`` is told how many cards each finished chunk held; ``should_stop``
    is asked between chunks, so a caller that lost its right to the cards stops voting at the next one.
    """
    with Session(engine) as session, session.begin():
        index = get_name_index(session)
    report = StageDReport()
    for n, chunk in enumerate(_scope_chunks(engine, card_ids, chunk_size)):
        if n and should_stop is not None and should_stop():
            break
        report.add(_with_retry(lambda: _run_chunk(engine, chunk, run_id, index)))
        if progress is not None:
            progress(len(chunk))
    return report


def _scope_chunks(engine: sa.Engine, card_ids: Sequence[int] | None, size: int) -> Iterator[list[int]]:
    if card_ids is not None:
        ids = sorted({int(i) for i in card_ids})
        for start in range(0, len(ids), size):
            yield ids[start:start + size]
        return
    last = 0
    while True:
        with engine.begin() as conn:
            ids = list(conn.execute(
                sa.select(Card.id).where(Card.id > last).order_by(Card.id).limit(size)
            ).scalars())
        if not ids:
            return
        yield ids
        last = ids[-1]


def _with_retry(work: Callable[[], StageDReport]) -> StageDReport:
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return work()
        except sa.exc.DBAPIError as exc:
            if getattr(exc.orig, "pgcode", None) not in _RETRYABLE_PGCODES or attempt == MAX_ATTEMPTS:
                raise
            log.warning("stage D chunk hit %s, retrying (attempt %d)", exc.orig.pgcode, attempt)
    raise AssertionError("unreachable")


def _run_chunk(engine: sa.Engine, ids: list[int], run_id: str, index: NameIndex) -> StageDReport:
    report = StageDReport()
    with Session(engine, expire_on_commit=False) as session, session.begin():
        cards = session.execute(
            sa.select(Card.id, Card.name, Card.card_type, Card.dpi, Card.content_hash,
                      Card.printing_status, Card.stage_d_pending, Card.updated_at)
            .where(Card.id.in_(ids)).order_by(Card.id)
        ).all()
        eligible = [c for c in cards if c.card_type == "card" and c.printing_status == "unresolved"]
        evidence = current_evidence(session, [c.id for c in eligible])
        work = [c for c in eligible if c.id in evidence]
        report.cards_considered = len(work)

        matches = {c.id: index.candidates_for(c.name) for c in work}
        facts = load_printing_facts(session, {p.id for m in matches.values() for p in m.candidates})
        candidates = {cid: [facts[p.id] for p in m.candidates if p.id in facts] for cid, m in matches.items()}
        hashes = {cid: ev.content_hash for cid, ev in evidence.items()}

        markers = _load_markers(session, hashes)
        seen = markers.current

        def persist(agent: str, decisions: dict[int, Decision]) -> tuple[int, int]:
            """Write one calculator's decisions; keep ``seen`` current (re-read only if a claim was lost)."""
            nonlocal markers, seen
            claimed, written, logged = _persist(session, agent, decisions, hashes, run_id, markers.older)
            if claimed == set(decisions):
                seen.update({(cid, agent): decisions[cid].outcome for cid in claimed})
            else:
                markers = _load_markers(session, hashes)
                seen = markers.current
            return written, logged

        complete = complete_set_codes(session, {ev.collector_set_code for ev in evidence.values()
                                                if ev.collector_set_code})
        decisions = {
            c.id: decide_join_key(evidence[c.id], candidates[c.id], index.lexicon, c.dpi, complete, c.name)
            for c in work if (c.id, A.JOIN_KEY_AGENT) not in seen
        }
        written, logged = persist(A.JOIN_KEY_AGENT, decisions)
        report.join_key_votes += written
        report.abstentions += logged

        decisions = {
            c.id: decide_fallback(evidence[c.id], candidates[c.id], c.name)
            for c in work
            if seen.get((c.id, A.JOIN_KEY_AGENT)) in A.JOIN_KEY_UNPLACED and (c.id, A.FALLBACK_AGENT) not in seen
        }
        written, logged = persist(A.FALLBACK_AGENT, decisions)
        report.fallback_votes += written
        report.abstentions += logged

        routes = {
            c.id: Decision(
                "abstain", reason=A.OUTCOME_TO_REVIEW,
                detail=review_packet(evidence[c.id], [p.id for p in candidates[c.id]],
                                     seen.get((c.id, A.JOIN_KEY_AGENT)), seen.get((c.id, A.FALLBACK_AGENT))),
            )
            for c in work
            if seen.get((c.id, A.JOIN_KEY_AGENT)) in A.JOIN_KEY_UNPLACED
            and seen.get((c.id, A.FALLBACK_AGENT)) not in (None, A.OUTCOME_VOTE)
            and (c.id, A.SLOW_PATH_AGENT) not in seen
        }
        _, logged = persist(A.SLOW_PATH_AGENT, routes)
        report.slow_path_routed += logged
        report.abstentions += logged

        _clear_backlog_flags(session, cards)
        _, report.consensus_changed = recompute_consensus(session, [c.id for c in work])
    return report


@dataclass
class _Markers:
    current: dict[tuple[int, str], str]     # (card, agent) -> outcome on the card's current image
    older: set[tuple[int, str]]             # (card, agent) pairs that also passed an earlier image


def _load_markers(session: Session, hashes: dict[int, str]) -> _Markers:
    markers = _Markers({}, set())
    if not hashes:
        return markers
    rows = session.execute(
        sa.select(StageDPass.card_id, StageDPass.agent_id, StageDPass.content_hash, StageDPass.outcome)
        .where(StageDPass.card_id.in_(sorted(hashes)))
    )
    for cid, agent, chash, outcome in rows:
        if hashes.get(cid) == chash:
            markers.current[(cid, agent)] = outcome
        else:
            markers.older.add((cid, agent))
    return markers


def _persist(
    session: Session, agent: str, decisions: dict[int, Decision], hashes: dict[int, str], run_id: str,
    older: set[tuple[int, str]],
) -> tuple[set[int], int, int]:
    """Claim the pass markers, then write votes and scan-log rows for the claimed cards only.

    Returns (claimed card ids, votes written, scan-log rows written). A claimed card's earlier
    votes by this agent were cast on an older image of the card, so they are replaced.
    """
    if not decisions:
        return set(), 0, 0
    ordered = sorted(decisions)
    claimed = set(insert_ignore(
        session, StageDPass.__table__,
        [{"card_id": cid, "agent_id": agent, "content_hash": hashes[cid],
          "outcome": decisions[cid].outcome, "run_id": run_id} for cid in ordered],
        returning=StageDPass.__table__.c.card_id,
    ))
    if not claimed:
        return claimed, 0, 0
    claimed_ids = sorted(claimed)
    superseded = [cid for cid in claimed_ids if (cid, agent) in older]
    if superseded:
        session.execute(
            sa.delete(PrintingVote).where(PrintingVote.agent_id == agent, PrintingVote.card_id.in_(superseded)),
            execution_options={"synchronize_session": False},
        )
    vote_rows = [
        {"card_id": cid, "printing_id": decisions[cid].printing_id,
         "is_no_match": decisions[cid].kind == A.OUTCOME_NO_MATCH,
         "agent_id": agent, "source": A.MACHINE_SOURCE, "confidence": decisions[cid].confidence, "run_id": run_id,
         "detail": decisions[cid].detail or None}
        for cid in claimed_ids if decisions[cid].is_vote
    ]
    written = insert_ignore(session, PrintingVote.__table__, vote_rows, returning=PrintingVote.__table__.c.id)
    log_rows = [
        {"card_id": cid, "agent_id": agent, "run_id": run_id, "reason": decisions[cid].reason,
         "detail": {"content_hash": hashes[cid], **decisions[cid].detail}}
        for cid in claimed_ids if not decisions[cid].is_vote
    ]
    if log_rows:
        session.connection().execute(sa.insert(ScanLog.__table__), log_rows)
    return claimed, len(written), len(log_rows)


def _clear_backlog_flags(session: Session, cards: Sequence[sa.Row]) -> None:
    """Take the chunk's cards out of the Stage D backlog unless a writer changed them since they were read.

    Each card is compared with the values read for it (``updated_at`` and ``content_hash``); on
    PostgreSQL a row another transaction is updating is re-checked after that transaction ends.
    """
    pending = [c for c in cards if c.stage_d_pending]
    if not pending:
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            sa.text(
                "UPDATE cards SET stage_d_pending = false, updated_at = now() "
                "FROM unnest(CAST(:ids AS bigint[]), CAST(:seen_at AS timestamptz[]), CAST(:seen_hash AS text[])) "
                "AS seen(id, seen_at, seen_hash) "
                "WHERE cards.id = seen.id AND cards.stage_d_pending "
                "AND cards.updated_at IS NOT DISTINCT FROM seen.seen_at "
                "AND cards.content_hash IS NOT DISTINCT FROM seen.seen_hash"
            ),
            {"ids": [c.id for c in pending], "seen_at": [c.updated_at for c in pending],
             "seen_hash": [c.content_hash for c in pending]},
        )
        return
    table = Card.__table__
    session.connection().execute(
        sa.update(table)
        .where(
            table.c.id == sa.bindparam("card_id"),
            table.c.stage_d_pending.is_(True),
            table.c.updated_at.is_not_distinct_from(sa.bindparam("seen_updated_at", type_=table.c.updated_at.type)),
            table.c.content_hash.is_not_distinct_from(sa.bindparam("seen_hash", type_=table.c.content_hash.type)),
        )
        .values(stage_d_pending=False),
        [{"card_id": c.id, "seen_updated_at": c.updated_at, "seen_hash": c.content_hash} for c in pending],
    )
