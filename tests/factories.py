"""Small builders for catalogue rows in tests (plain inserts, the way any writer could add them)."""

from __future__ import annotations

import sqlalchemy as sa

from stage_e_dagster.catalog.models import Card


def insert_cards(
    engine: sa.Engine, count: int, *, prefix: str = "card", locator: str = "file:///nowhere/{i}.jpg"
) -> list[int]:
    """Insert ``count`` cards with raw SQL-level inserts; returns their ids in order."""
    rows = [
        {"identifier": f"{prefix}-{i}", "name": f"Card {i}", "image_locator": locator.format(i=i)} for i in range(count)
    ]
    with engine.begin() as conn:
        conn.execute(sa.insert(Card), rows)
        ids = conn.execute(
            sa.select(Card.id).where(Card.identifier.in_([r["identifier"] for r in rows])).order_by(Card.id)
        ).scalars()
        return list(ids)
