"""Weighted printing consensus, pooled over cards that hold byte-identical images.

Rules (the original system's): a user vote weighs 1, an admin vote 5, a machine vote 0.5. The
winning outcome needs a decision weight of at least 2, at least 60% of the total, and at least
one human-backed vote in its group, so machine votes alone never resolve a card. When humans
disagree among themselves, or human weight alone already reaches the bar, machine weight is left
out of the decision. Cards with the same content hash are one target: their votes are pooled,
each agent counts once, and an agent that voted for different outcomes across the group is dropped.
Bytes that are not an image (terminal evidence, e.g. the same HTML error page served for many
uploads) do not make cards one target: such cards are tallied alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import Card, ImageEvidence, PrintingVote

SOURCE_WEIGHTS = {"user": 1.0, "admin": 5.0, "ocr": 0.5, "deduction": 0.5}
HUMAN_SOURCES = frozenset({"user", "admin"})
MIN_WEIGHT = 2.0
MIN_SHARE = 0.6
NO_MATCH = "no_match"

_IN_CHUNK = 900


@dataclass(frozen=True)
class VoteRecord:
    agent_id: str
    source: str
    outcome: int | str          # a printing id or NO_MATCH

    @property
    def weight(self) -> float:
        return SOURCE_WEIGHTS.get(self.source, 0.0)

    @property
    def human(self) -> bool:
        return self.source in HUMAN_SOURCES


@dataclass(frozen=True)
class ConsensusOutcome:
    status: str                   # "unresolved", "resolved" or "no_match"
    printing_id: int | None
    weight: float                 # the leading outcome's decision weight
    share: float
    votes_counted: int

    @property
    def as_fields(self) -> tuple[str, int | None]:
        return self.status, self.printing_id


UNRESOLVED = ConsensusOutcome("unresolved", None, 0.0, 0.0, 0)


def pool_votes(votes: Iterable[VoteRecord]) -> list[VoteRecord]:
    """One vote per agent, in first-seen order; agents that backed different outcomes are dropped."""
    by_agent: dict[str, list[VoteRecord]] = {}
    for v in votes:
        by_agent.setdefault(v.agent_id, []).append(v)
    pooled = []
    for agent_votes in by_agent.values():
        if len({v.outcome for v in agent_votes}) == 1:
            pooled.append(max(agent_votes, key=lambda v: v.weight))
    return pooled


def tally(votes: Iterable[VoteRecord]) -> ConsensusOutcome:
    """Apply the weighted rule to one identification target's votes (pooling included)."""
    pooled = pool_votes(votes)
    if not pooled:
        return UNRESOLVED
    order: list[int | str] = []
    human_w: dict[int | str, float] = defaultdict(float)
    machine_w: dict[int | str, float] = defaultdict(float)
    for v in pooled:
        if v.outcome not in human_w and v.outcome not in machine_w:
            order.append(v.outcome)
        (human_w if v.human else machine_w)[v.outcome] += v.weight
    groups_with_humans = [o for o in order if human_w[o] > 0]
    humans_only = len(groups_with_humans) >= 2 or any(human_w[o] >= MIN_WEIGHT for o in order)
    decision = {o: human_w[o] if humans_only else human_w[o] + machine_w[o] for o in order}
    total = sum(decision.values())
    winner = max(order, key=lambda o: decision[o])  # ties keep the first-seen outcome
    weight = decision[winner]
    share = weight / total if total > 0 else 0.0
    if weight >= MIN_WEIGHT and share >= MIN_SHARE and human_w[winner] > 0:
        if winner == NO_MATCH:
            return ConsensusOutcome("no_match", None, weight, share, len(pooled))
        return ConsensusOutcome("resolved", int(winner), weight, share, len(pooled))
    return ConsensusOutcome("unresolved", None, weight, share, len(pooled))


def recompute_consensus(session: Session, card_ids: Iterable[int]) -> tuple[dict[int, ConsensusOutcome], int]:
    """Re-tally the targets of these cards and persist the verdict to every member.

    Returns each member's outcome and how many cards changed status or inferred printing. Rows are
    updated in id order so that two concurrent recomputations lock them in the same order.
    """
    ids = sorted(set(card_ids))
    if not ids:
        return {}, 0
    members: dict[int, tuple[str | None, str, int | None]] = {}
    hashes: set[str] = set()
    for chunk in _chunks(ids):
        for cid, chash, status, inferred in session.execute(
            sa.select(Card.id, Card.content_hash, Card.printing_status, Card.inferred_printing_id)
            .where(Card.id.in_(chunk))
        ):
            members[cid] = (chash, status, inferred)
            if chash is not None:
                hashes.add(chash)
    for chunk in _chunks(ids):  # by card id: the (card_id, content_hash) key is the index to use
        hashes.difference_update(session.execute(
            sa.select(ImageEvidence.content_hash).where(ImageEvidence.card_id.in_(chunk), ImageEvidence.terminal)
        ).scalars())
    for chunk in _chunks(sorted(hashes)):
        for cid, chash, status, inferred in session.execute(
            sa.select(Card.id, Card.content_hash, Card.printing_status, Card.inferred_printing_id)
            .where(Card.content_hash.in_(chunk))
        ):
            members[cid] = (chash, status, inferred)

    target_of = {cid: (chash if chash in hashes else f"card:{cid}") for cid, (chash, _, _) in members.items()}
    votes_by_target: dict[str, list[VoteRecord]] = defaultdict(list)
    for chunk in _chunks(sorted(members)):
        for cid, agent, source, pid, is_nm in session.execute(
            sa.select(PrintingVote.card_id, PrintingVote.agent_id, PrintingVote.source,
                      PrintingVote.printing_id, PrintingVote.is_no_match)
            .where(PrintingVote.card_id.in_(chunk))
            .order_by(PrintingVote.id)
        ):
            votes_by_target[target_of[cid]].append(VoteRecord(agent, source, NO_MATCH if is_nm else pid))

    outcomes_by_target = {t: tally(votes_by_target.get(t, ())) for t in set(target_of.values())}
    outcomes: dict[int, ConsensusOutcome] = {}
    updates = []
    for cid in sorted(members):
        outcome = outcomes_by_target[target_of[cid]]
        outcomes[cid] = outcome
        _, status, inferred = members[cid]
        if (status, inferred) != outcome.as_fields:
            updates.append({"card_id": cid, "status": outcome.status, "printing_id": outcome.printing_id})
    if updates:
        cards = Card.__table__
        session.connection().execute(
            sa.update(cards)
            .where(cards.c.id == sa.bindparam("card_id"))
            .values(printing_status=sa.bindparam("status"), inferred_printing_id=sa.bindparam("printing_id")),
            updates,
        )
    return outcomes, len(updates)


def _chunks(items: Sequence, size: int = _IN_CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
