"""Drill: a host that answers 429 to 30% of requests at random, behind the real daemon.

A throttle slows the host (the shared pacer); each card waits only a short, jittered while, so the
storm costs the tail minutes, not the half hour one card's doubling streak used to.

The pacer's backoff is counted in the rate's own interval (each throttle doubles it, at most
``MAX_BACKOFF_SCALE`` times), and at the shipped 7 requests a second a storm holds the host near that cap:
about 2.3 s a request, five of the drill's six minutes. The drill's host is paced ten times faster
(``STAGE_E_FETCH_RATE_PER_SEC``) and its seconds are counted at the shipped rate: the ten minutes still
bound the same drill, and the cards' own waits and the runs' start-ups weigh more in them, not less.
"""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.engine import make_engine, session_scope
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card, EnvelopeTrip, FetchOutcome, ImageEvidence
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.settings import Settings
from stage_e_dagster.stage_c.pacer import MAX_BACKOFF_SCALE

from .conftest import ImageServer
from .test_daemon import Stack, assert_no_duplicates

pytestmark = pytest.mark.slow

CARDS = 100
STORM_SHARE = 0.3
DONE_WITHIN_S = 600  # at the shipped rate
SHIPPED_RATE_PER_SEC = float(Settings.model_fields["fetch_rate_per_sec"].default)
DRILL_RATE_PER_SEC = 10 * SHIPPED_RATE_PER_SEC
INSERT_CARD = sa.text(
    "INSERT INTO cards (identifier, name, image_locator, card_type, dpi, declared_content_hash) "
    "VALUES (:identifier, :name, :image_locator, :card_type, :dpi, :declared_content_hash)"
)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _at_the_shipped_rate(took_s: float, requests: int) -> float:
    """The drill's seconds had its host been paced at the shipped rate: each request's slot longer by the
    two intervals' difference at the pacer's cap. A bound from above: the slower pace would hide the runs'
    start-ups and the cards' own waits behind its slots, never add to them."""
    return took_s + requests * MAX_BACKOFF_SCALE * (1 / SHIPPED_RATE_PER_SEC - 1 / DRILL_RATE_PER_SEC)


def _take_out_cards(engine: sa.Engine, base_url: str, corpus: Path) -> list[dict[str, object]]:
    """The seeded cards' rows, pointed at the storm server, deleted to be inserted behind the daemon."""
    columns = (Card.identifier, Card.name, Card.image_locator, Card.card_type, Card.dpi, Card.declared_content_hash)
    with engine.begin() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(*columns).order_by(Card.id)).mappings()]
        conn.execute(sa.delete(Card))
    for row in rows:
        relative = Path(str(row["image_locator"]).removeprefix("file://")).relative_to(corpus)
        row["image_locator"] = f"{base_url}/{relative.as_posix()}"
    return rows


def _dispatch_ticked(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(
            sa.text("SELECT count(*) FROM sensor_heartbeats WHERE sensor_name = 'card_created_sensor'")
        ).scalar_one())


def test_a_hundred_cards_under_a_thirty_percent_429_storm_are_done_within_ten_minutes_without_a_trip(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "catalog.sqlite"
    engine = make_engine(f"sqlite:///{catalog}")
    upgrade(engine)
    corpus = (tmp_path / "corpus").resolve()
    seed_corpus(engine, corpus, cards=CARDS, seed=19, broken_share=0.0)
    server = ImageServer(corpus, throttle_share=STORM_SHARE)
    rows = _take_out_cards(engine, server.base, corpus)
    engine.dispose()
    stack = Stack(tmp_path, f"sqlite:///{catalog}", corpus,
                  extra_env={"STAGE_E_MICRO_BATCH_SIZE": "10", "STAGE_E_MAX_CONCURRENT_DISPATCHES": "2",
                             "STAGE_E_FETCH_RATE_PER_SEC": f"{DRILL_RATE_PER_SEC:g}"})
    try:
        stack.start()
        stack.wait_until(lambda: _dispatch_ticked(stack.engine), timeout_s=300, what="the first dispatch tick")
        with stack.engine.begin() as conn:
            conn.execute(INSERT_CARD, rows)
        committed = datetime.now(timezone.utc)
        started = time.monotonic()
        stack.wait_until(stack.idle, timeout_s=DONE_WITHIN_S, what=f"{CARDS} cards through the storm")
        took_s = time.monotonic() - started
        shipped_s = _at_the_shipped_rate(took_s, len(server.requests))
        with session_scope(stack.engine) as session:
            done = session.execute(sa.select(ImageEvidence.card_id, ImageEvidence.created_at,
                                             ImageEvidence.terminal)).all()
            trips = session.execute(sa.select(EnvelopeTrip.bar, EnvelopeTrip.detail)).all()
            outcomes = dict(session.execute(
                sa.select(FetchOutcome.outcome, sa.func.count()).group_by(FetchOutcome.outcome)).all())
            throttled_most = session.execute(sa.select(sa.func.max(Card.throttle_count))).scalar_one()
        latencies = [(created - committed).total_seconds() for _, created, _ in done]
        print(f"\nstorm drill: {CARDS} cards, {server.throttled} of {len(server.requests)} requests answered 429; "
              f"all done {took_s:.0f} s after the insert at {DRILL_RATE_PER_SEC:g}/s, at most {shipped_s:.0f} s at "
              f"{SHIPPED_RATE_PER_SEC:g}/s; insert-to-evidence p50 {_percentile(latencies, 0.5):.0f} s, "
              f"p90 {_percentile(latencies, 0.9):.0f} s, p99 {_percentile(latencies, 0.99):.0f} s, "
              f"max {max(latencies):.0f} s; outcomes {outcomes}; longest throttle streak left {throttled_most}")
        assert trips == []
        assert len(done) == CARDS and not any(terminal for _, _, terminal in done)
        assert server.throttled > 0 and outcomes.get("throttled", 0) == server.throttled
        assert sorted(server.served) == sorted(set(server.served)) and len(server.served) == CARDS
        assert shipped_s <= DONE_WITHIN_S
        assert_no_duplicates(stack.engine)
    finally:
        stack.stop()
        server.close()
        stack.engine.dispose()
        shutil.rmtree(tmp_path / "dagster_home", ignore_errors=True)
