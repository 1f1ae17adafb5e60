"""Stage D's entries for ``stage-e bulk``: ``--stage d`` and the ``--stage all`` chain (C, then D)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Sequence

import sqlalchemy as sa

from ..catalog.models import Card
from ..settings import Settings
from ..stage_d.run import run_stage_d

CountFn = Callable[[sa.Engine, "Sequence[int] | None"], int]
RunFn = Callable[[sa.Engine, Settings, "Sequence[int] | None", int | None, str, Callable[[int], None]], dict[str, Any]]


def _scope(engine: sa.Engine, card_ids: Sequence[int] | None, limit: int | None) -> Sequence[int] | None:
    """The cards a BULK Stage D pass covers: the given ids, or every card; ``limit`` keeps the first N."""
    if limit is None:
        return card_ids
    if card_ids is not None:
        return list(card_ids)[:limit]
    with engine.connect() as conn:
        return list(conn.execute(sa.select(Card.id).order_by(Card.id).limit(limit)).scalars())


def stage_d_total(engine: sa.Engine, card_ids: Sequence[int] | None) -> int:
    if card_ids is not None:
        return len(card_ids)
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(Card)).scalar_one())


def run_bulk_stage_d(engine: sa.Engine, cfg: Settings, card_ids: Sequence[int] | None, limit: int | None,
                     writer: str, advance: Callable[[int], None]) -> dict[str, Any]:
    report = run_stage_d(engine, _scope(engine, card_ids, limit), run_id=writer, progress=advance)
    return asdict(report)


def chain_stages(first: tuple[CountFn, RunFn], second: tuple[CountFn, RunFn]) -> tuple[CountFn, RunFn]:
    """One BULK entry that runs ``first`` then ``second`` over the same scope (Stage D runs even after a lockout)."""

    def count(engine: sa.Engine, card_ids: Sequence[int] | None) -> int:
        return first[0](engine, card_ids) + second[0](engine, card_ids)

    def run(engine: sa.Engine, cfg: Settings, card_ids: Sequence[int] | None, limit: int | None, writer: str,
            advance: Callable[[int], None]) -> dict[str, Any]:
        before = first[1](engine, cfg, card_ids, limit, writer, advance)
        after = second[1](engine, cfg, card_ids, limit, writer, advance)
        return {"stage_c": before, "stage_d": after, "lockout": before.get("lockout")}

    return count, run
