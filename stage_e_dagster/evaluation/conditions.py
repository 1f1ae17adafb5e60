"""Scores per condition of a labelled corpus (the photo-like seed labels each card's ``condition``),
so a condition that fails shows as its own row instead of vanishing in the total."""

from __future__ import annotations

from collections import Counter
from typing import Any

import sqlalchemy as sa

from ..catalog.models import Card, StageDPass
from .stage_c import evaluate_stage_c
from .stage_d import evaluate_stage_d


def _row(name: str, engine: sa.Engine, labels: list[dict[str, Any]]) -> dict[str, Any]:
    c = evaluate_stage_c(engine, labels)
    d = evaluate_stage_d(engine, labels)
    return {
        "condition": name, "cards": len(labels),
        # right of those that print one: old frames print no number, 2008-2014 frames no set code
        "number_right": c["collector_number_correct"], "number_printed": c["collector_number_total"],
        "set_right": c["set_code_correct"], "set_printed": c["set_code_total"],
        "votes": d["machine_votes"], "wrong_votes": d["machine_votes"] - d["machine_votes_correct"],
        "fallback_votes": d["fallback_votes"],
    }


def _groups(labels: list[dict[str, Any]], field: str) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for label in labels:
        groups.setdefault(str(label.get(field) or "-"), []).append(label)
    return groups


def scores_by_condition(engine: sa.Engine, labels: list[dict[str, Any]], *, field: str = "condition"
                        ) -> list[dict[str, Any]]:
    """One row per value of ``field`` (in the labels' order; unlabelled cards as ``-``), then ``total``."""
    rows = [_row(name, engine, group) for name, group in _groups(labels, field).items()]
    rows.append(_row("total", engine, labels))
    return rows


def outcomes_by_condition(engine: sa.Engine, labels: list[dict[str, Any]], *, field: str = "condition"
                          ) -> dict[str, Counter[str]]:
    """Per value of ``field``: how many cards each calculator's pass ended in each outcome
    (``join-key:border-mismatch``, ``fallback:vote``, ...), which says why a condition fails."""
    condition = {str(lb["identifier"]): name for name, group in _groups(labels, field).items() for lb in group}
    found: dict[str, Counter[str]] = {name: Counter() for name in dict.fromkeys(condition.values())}
    identifiers = sorted(condition)
    with engine.connect() as conn:
        for start in range(0, len(identifiers), 500):
            for identifier, agent, outcome in conn.execute(
                sa.select(Card.identifier, StageDPass.agent_id, StageDPass.outcome)
                .join(StageDPass, StageDPass.card_id == Card.id)
                .where(Card.identifier.in_(identifiers[start:start + 500]))
            ):
                short = agent.removeprefix("stage-d-").removesuffix("-v1")
                found[condition[identifier]][f"{short}:{outcome}"] += 1
    return found
