"""A throttled card (429/503) is not batched again before its next-eligible time, and is after it:
the sensors' selection and the sweep both skip it, on SQLite and PostgreSQL. The throttle comes
from a real fetch of a real HTTP host, recorded by Stage C."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card
from stage_e_dagster.dispatch.backlog_walk import walk_backlog
from stage_e_dagster.dispatch.batches import create_batches
from stage_e_dagster.dispatch.claims import release_claims
from stage_e_dagster.dispatch.sizing import BatchPlan
from stage_e_dagster.stage_c.run import run_stage_c
from tests.factories import insert_cards
from tests.stage_c.conftest import make_fetcher

TTL = 600
PLAN = BatchPlan(batch_size=10, max_batches=1)


def batch_now(engine: sa.Engine, now) -> list[int]:  # type: ignore[no-untyped-def]
    """What a dispatch sensor would batch at ``now``; its claims are released at once, as a finished run does."""
    with session_scope(engine) as session:
        made = create_batches(session, STAGE_C_PENDING, PLAN, trigger_reason="card-created", now=now, claim_ttl_s=TTL)
        for batch in made.batches:
            release_claims(session, batch.batch_key)
        return [cid for batch in made.batches for cid in batch.card_ids]


def sweep_now(engine: sa.Engine, now) -> list[int]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as session:
        walk = walk_backlog(session, PLAN, now=now, claim_ttl_s=TTL)
        ids = [cid for batch in walk.batches for cid in batch.card_ids]
        for batch in walk.batches:
            release_claims(session, batch.batch_key)
        return ids


def next_eligible(engine: sa.Engine, card_id: int):  # type: ignore[no-untyped-def]
    with Session(engine) as session:
        return session.get(Card, card_id).next_eligible_at


def test_a_throttled_card_is_not_batched_before_its_time_and_is_after_it(engine: sa.Engine, image_host: str) -> None:
    others = insert_cards(engine, 2)
    with engine.begin() as conn:
        throttled = int(conn.execute(sa.insert(Card).values(
            identifier="busy", name="Busy", image_locator=f"{image_host}/busy-long.jpg"
        ).returning(Card.id)).scalar_one())
    assert batch_now(engine, utcnow()) == others + [throttled]  # eligible before any throttle

    with make_fetcher(engine, [], [image_host.split("//", 1)[1]]) as fetcher:
        report = run_stage_c(engine, [throttled], writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())
    assert report.throttled == 1
    until = next_eligible(engine, throttled)
    assert until - utcnow() > timedelta(seconds=100)  # the host's Retry-After: 120 is longer than the backoff

    soon = utcnow() + timedelta(seconds=5)
    assert batch_now(engine, soon) == others  # the sensors' fill skips it
    assert sweep_now(engine, soon + timedelta(seconds=1)) == others  # and so does the sweep (a new batch key)
    later = until + timedelta(seconds=1)
    assert batch_now(engine, later) == others + [throttled]
    assert throttled in sweep_now(engine, later + timedelta(seconds=1))


def test_cards_never_throttled_are_eligible_and_a_past_backoff_frees_the_card(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(sa.update(Card).where(Card.id == ids[0]).values(next_eligible_at=now + timedelta(minutes=5)))
        conn.execute(sa.update(Card).where(Card.id == ids[1]).values(next_eligible_at=now - timedelta(minutes=5)))
    assert batch_now(engine, now) == ids[1:]
    assert batch_now(engine, now + timedelta(minutes=5)) == ids  # exactly at its time it is eligible
