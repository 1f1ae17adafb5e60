"""Stage D against labels: machine-vote precision, coverage, and wrong resolutions.

A label's true printing is found from its ``set_code``, ``collector_number`` and (optional)
``lang``; ``"no_printing": true`` says the card shows no catalogued printing. Labels with neither
are left out. A machine vote is correct when it names the true printing (or no-match when there
is none); a resolution is wrong when the card's consensus names anything else.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.collector_line import normalize_collector_number
from ..catalog.models import Card, Expansion, Printing, PrintingVote, ScanLog
from ..stage_d.agents import FALLBACK_AGENT, JOIN_KEY_AGENT, OUTCOME_TO_REVIEW, SLOW_PATH_AGENT
from ..stage_d.consensus import HUMAN_SOURCES
from ..stage_d.human import cast_human_vote

NO_PRINTING = "no-printing"
_CHUNK = 500


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def label_truths(session: Session, labels: list[dict[str, Any]]) -> dict[int, int | str]:
    """Card id -> true printing id (or NO_PRINTING) for every label that says which it is."""
    printings: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    for pid, code, number, lang in session.execute(
        sa.select(Printing.id, Expansion.code, Printing.collector_number, Printing.lang)
        .join(Expansion, Expansion.id == Printing.expansion_id)
    ):
        printings[(code.lower(), normalize_collector_number(number))].append((pid, (lang or "en").lower()))
    by_identifier: dict[str, int] = {}
    identifiers = [str(lb["identifier"]) for lb in labels]
    for start in range(0, len(identifiers), _CHUNK):
        by_identifier.update(session.execute(
            sa.select(Card.identifier, Card.id).where(Card.identifier.in_(identifiers[start:start + _CHUNK]))
        ).all())
    truths: dict[int, int | str] = {}
    for lb in labels:
        card_id = by_identifier.get(str(lb["identifier"]))
        if card_id is None:
            continue
        if lb.get("no_printing"):
            truths[card_id] = NO_PRINTING
            continue
        if not lb.get("set_code") or not lb.get("collector_number"):
            continue
        key = (str(lb["set_code"]).lower(), normalize_collector_number(str(lb["collector_number"])))
        found = printings.get(key, [])
        lang = str(lb.get("lang") or "").lower()
        if lang:
            found = [f for f in found if f[1] == lang]
        elif len(found) > 1:
            found = [f for f in found if f[1] == "en"] or found
        if len(found) == 1:
            truths[card_id] = found[0][0]
    return truths


def evaluate_stage_d(engine: sa.Engine, labels: list[dict[str, Any]]) -> dict[str, Any]:
    """Vote precision (overall and per calculator), coverage, routing and consensus outcomes."""
    with Session(engine) as session:
        truths = label_truths(session, labels)
        ids = sorted(truths)
        votes: list[tuple[int, str, str, int | None, bool]] = []
        states: dict[int, tuple[str, int | None]] = {}
        routed: set[int] = set()
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            votes.extend(session.execute(
                sa.select(PrintingVote.card_id, PrintingVote.agent_id, PrintingVote.source,
                          PrintingVote.printing_id, PrintingVote.is_no_match)
                .where(PrintingVote.card_id.in_(chunk))
            ).all())
            states.update({cid: (status, pid) for cid, status, pid in session.execute(
                sa.select(Card.id, Card.printing_status, Card.inferred_printing_id).where(Card.id.in_(chunk)))})
            routed.update(session.execute(
                sa.select(ScanLog.card_id).where(ScanLog.card_id.in_(chunk), ScanLog.agent_id == SLOW_PATH_AGENT,
                                                 ScanLog.reason == OUTCOME_TO_REVIEW)).scalars())

    per_agent: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    voted_cards: set[int] = set()
    for cid, agent, source, pid, is_nm in votes:
        if source in HUMAN_SOURCES:
            continue
        said = NO_PRINTING if is_nm else pid
        per_agent[agent][0] += said == truths[cid]
        per_agent[agent][1] += 1
        voted_cards.add(cid)
    correct = sum(c for c, _ in per_agent.values())
    total = sum(n for _, n in per_agent.values())

    resolved = no_match = wrong = 0
    for cid in ids:
        status, pid = states[cid]
        if status == "resolved":
            resolved += 1
            wrong += pid != truths[cid]
        elif status == "no_match":
            no_match += 1
            wrong += truths[cid] != NO_PRINTING
    jk, fb = per_agent[JOIN_KEY_AGENT], per_agent[FALLBACK_AGENT]
    return {
        "labelled_cards": len(ids),
        "machine_votes": total,
        "machine_votes_correct": correct,
        "vote_precision": _ratio(correct, total),
        "coverage": _ratio(len(voted_cards), len(ids)),
        "join_key_votes": jk[1],
        "join_key_precision": _ratio(jk[0], jk[1]),
        "fallback_votes": fb[1],
        "fallback_precision": _ratio(fb[0], fb[1]),
        "routed_to_review": len(routed),
        "resolved_cards": resolved,
        "no_match_cards": no_match,
        "wrong_resolutions": wrong,
    }


def cast_label_votes(
    engine: sa.Engine, labels: list[dict[str, Any]], *, share: float, voters: int = 2, seed: int = 0,
    user_prefix: str = "label-voter",
) -> int:
    """Cast human votes for the labelled truth on a random ``share`` of the labelled cards.

    Each chosen card gets one vote from each of ``voters`` users. Returns the number of cards voted.
    A stand-in for reviewers in tests, the demo and evaluations; it reads only the labels.
    """
    with Session(engine) as session:
        truths = label_truths(session, labels)
    chosen = sorted(truths)
    random.Random(seed).shuffle(chosen)
    chosen = sorted(chosen[: round(len(chosen) * share)])
    for cid in chosen:
        truth = truths[cid]
        for n in range(1, voters + 1):
            cast_human_vote(engine, cid, None if truth == NO_PRINTING else int(truth), user=f"{user_prefix}-{n}")
    return len(chosen)
