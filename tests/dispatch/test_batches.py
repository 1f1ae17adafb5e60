"""Batch selection, claims, retries and the sweep walk, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING, STAGE_D_PENDING
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, CardClaim, MicroBatch, ScanLog
from stage_e_dagster.dispatch.backlog_walk import walk_backlog
from stage_e_dagster.dispatch.batches import (
    PARKED_KEY,
    abandon,
    create_batches,
    fail_and_retry,
    mark_succeeded,
    renew_lease,
    request_again,
    take_batch,
)
from stage_e_dagster.dispatch.keys import is_batch_key, new_batch_key, retry_key
from stage_e_dagster.dispatch.sizing import BatchPlan
from tests.factories import insert_cards

TTL = 600


def make(engine: sa.Engine, plan: BatchPlan, *, seeds_after=None, predicate=STAGE_C_PENDING, now=None):
    with session_scope(engine) as session:
        made = create_batches(
            session,
            predicate,
            plan,
            trigger_reason="card-created",
            now=now or utcnow(),
            claim_ttl_s=TTL,
            seeds_after=seeds_after,
        )
        return [(b.batch_key, list(b.card_ids), b.attempt) for b in made.batches], made.highest_seed_id


def test_keys_are_short_sortable_and_retries_get_new_keys() -> None:
    now = utcnow()
    key = new_batch_key(now, [3, 1, 2])
    assert is_batch_key(key) and len(key) <= 32 and "..." not in key
    assert key == new_batch_key(now, [1, 2, 3])
    assert key != new_batch_key(now, [1, 2, 4])
    assert retry_key(key, 2) == key + "-r2"
    assert retry_key(key + "-r2", 3) == key + "-r3"
    assert is_batch_key(retry_key(key, 2))


def test_batches_are_bounded_and_claimed_cards_are_never_batched_twice(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 12)
    first, _ = make(engine, BatchPlan(batch_size=5, max_batches=2))
    assert [c for _, c, _ in first] == [ids[0:10:2], ids[1:10:2]]  # dealt in turn, as many batches
    second, _ = make(engine, BatchPlan(batch_size=5, max_batches=2))
    assert [c for _, c, _ in second] == [ids[10:12]]
    third, _ = make(engine, BatchPlan(batch_size=5, max_batches=2))
    assert third == []


def test_seeds_come_first_then_the_backlog_fills(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 10)
    batches, highest = make(engine, BatchPlan(batch_size=4, max_batches=1), seeds_after=ids[7])
    assert batches[0][1] == sorted([ids[8], ids[9], ids[0], ids[1]])
    assert highest == ids[9]


def test_cards_dealt_in_turn_even_out_a_backlog_whose_cost_follows_its_id(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 7)
    batches, _ = make(engine, BatchPlan(batch_size=4, max_batches=3))
    # Seven cards at four a batch make two batches, as cut into runs of ids they would (4 and 3),
    # but the older and newer cards are shared between them.
    assert [c for _, c, _ in batches] == [[ids[0], ids[2], ids[4], ids[6]], [ids[1], ids[3], ids[5]]]


def test_an_expired_claim_frees_its_cards(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    make(engine, BatchPlan(batch_size=3, max_batches=1))
    assert make(engine, BatchPlan(batch_size=3, max_batches=1))[0] == []
    later = utcnow() + timedelta(seconds=TTL + 1)
    again, _ = make(engine, BatchPlan(batch_size=3, max_batches=1), now=later)
    assert again[0][1] == ids


def test_success_releases_claims_and_done_cards_leave_the_backlog(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 2)
    [(key, cards, _)], _ = make(engine, BatchPlan(batch_size=5, max_batches=1))
    with session_scope(engine) as session:
        session.execute(sa.update(Card).where(Card.id.in_(cards)).values(stage_c_pending=False))
        assert take_batch(session, key, run_id="run-1", now=utcnow(), lease_until=utcnow() + timedelta(seconds=TTL))
        assert mark_succeeded(session, session.get(MicroBatch, key), now=utcnow(), peak_rss_mb=123.0)
    with session_scope(engine) as session:
        assert session.execute(sa.select(sa.func.count()).select_from(CardClaim)).scalar_one() == 0
        assert session.get(MicroBatch, key).status == "succeeded"
    assert make(engine, BatchPlan(batch_size=5, max_batches=1))[0] == []
    assert ids == cards


def test_a_failed_batch_retries_its_unfinished_cards_under_new_keys_then_parks_them(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=3, max_batches=1))
    with session_scope(engine) as session:
        session.execute(sa.update(Card).where(Card.id == ids[0]).values(stage_c_pending=False))
    keys = [key]
    for attempt in (2, 3):
        with session_scope(engine) as session:
            outcome = fail_and_retry(
                session,
                session.get(MicroBatch, keys[-1]),
                reason="RuntimeError: boom",
                now=utcnow(),
                max_attempts=3,
                claim_ttl_s=TTL,
            )
            retry = outcome.retry
            assert outcome.recorded and retry is not None and retry.attempt == attempt and retry.card_ids == ids[1:]
            assert retry.batch_key == retry_key(key, attempt) and retry.retry_of == keys[-1]
            keys.append(retry.batch_key)
        # The unfinished cards stay claimed by the retry: no fresh batch takes them meanwhile.
        assert make(engine, BatchPlan(batch_size=3, max_batches=1))[0] == []
    with session_scope(engine) as session:
        assert (
            fail_and_retry(
                session,
                session.get(MicroBatch, keys[-1]),
                reason="RuntimeError: boom",
                now=utcnow(),
                max_attempts=3,
                claim_ttl_s=TTL,
            ).retry
            is None
        )
    with session_scope(engine) as session:
        statuses = [session.get(MicroBatch, k).status for k in keys]
        assert statuses == ["failed", "failed", "failed"]
        parked = session.execute(sa.select(CardClaim.card_id).where(CardClaim.batch_key == PARKED_KEY)).scalars().all()
        assert sorted(parked) == ids[1:]
        reasons = session.execute(sa.select(ScanLog.card_id, ScanLog.reason)).all()
        assert sorted(reasons) == [(ids[1], "dispatch-attempts-exhausted"), (ids[2], "dispatch-attempts-exhausted")]
    assert make(engine, BatchPlan(batch_size=3, max_batches=1))[0] == []


def test_abandoning_puts_cards_back_in_the_backlog(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 2)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=2, max_batches=1))
    with session_scope(engine) as session:
        assert abandon(session, key, reason="queued run cancelled", now=utcnow())
        assert not abandon(session, key, reason="settled twice", now=utcnow())
    again, _ = make(engine, BatchPlan(batch_size=2, max_batches=1))
    assert again[0][1] == ids and again[0][2] == 1


def test_stage_d_selection_takes_every_unclaimed_card_whoever_wrote_it(engine: sa.Engine) -> None:
    """The dispatcher's own evidence is no exception: a card whose Stage D never ran (its retry was
    cancelled, the batch was parked) is found again; only a live claim keeps a card out."""
    ids = insert_cards(engine, 4)
    with engine.begin() as conn:
        conn.execute(sa.update(Card).values(stage_c_pending=False, stage_d_pending=True))
        conn.execute(sa.update(Card).where(Card.id == ids[0]).values(evidence_writer="dispatch:run-1"))
        conn.execute(sa.update(Card).where(Card.id == ids[1]).values(evidence_writer="person:alice"))
        conn.execute(sa.update(Card).where(Card.id == ids[2]).values(evidence_writer="bulk:20261201"))
    with session_scope(engine) as session:  # a live batch holds the last card
        session.add(CardClaim(card_id=ids[3], batch_key="mb-live", expires_at=utcnow() + timedelta(seconds=TTL)))
    batches, _ = make(engine, BatchPlan(batch_size=10, max_batches=1), predicate=STAGE_D_PENDING)
    assert batches[0][1] == ids[:3]


def test_sweep_walks_with_a_cursor_and_says_empty_only_after_a_full_lap(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 7)
    plan = BatchPlan(batch_size=3, max_batches=2)

    def walk():
        with session_scope(engine) as session:
            w = walk_backlog(session, plan, now=utcnow(), claim_ttl_s=TTL)
            return [list(b.card_ids) for b in w.batches], w.empty_after_full_lap, w.laps_completed

    assert walk() == ([ids[0:3], ids[3:6]], False, 0)
    # The rest of the lap: one card, then the wrap; the lap found cards, so it is not empty, and
    # the next lap finds only claimed cards: in flight, not an empty backlog.
    batches, empty, laps = walk()
    assert batches == [ids[6:7]] and not empty and laps == 2
    # Everything is claimed now; mark it all done, then a full lap finds nothing.
    with engine.begin() as conn:
        conn.execute(sa.update(Card).values(stage_c_pending=False))
    batches, empty, _ = walk()
    assert batches == [] and empty


def test_the_sweep_walk_reports_the_cards_batched_after_each_batch(engine: sa.Engine) -> None:
    """What `stage-e sweep` counts on its progress line."""
    insert_cards(engine, 7)
    counts: list[int] = []
    with session_scope(engine) as session:
        walk = walk_backlog(session, BatchPlan(batch_size=3, max_batches=5), now=utcnow(), claim_ttl_s=TTL,
                            progress=counts.append)
    assert counts == [3, 6, 7] and walk.card_count == 7


def test_requesting_a_pending_batch_again_retakes_its_claims_and_shrinks_to_what_it_holds(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=3, max_batches=1))
    later = utcnow() + timedelta(seconds=TTL + 1)  # the batch waited; its claims expired
    with session_scope(engine) as session:  # meanwhile another batch took one of its cards
        session.execute(
            sa.update(CardClaim)
            .where(CardClaim.card_id == ids[1])
            .values(batch_key="mb-other", expires_at=later + timedelta(seconds=TTL))
        )
    with session_scope(engine) as session:  # a second evaluator read the row too, before the first requested it
        stale_view = session.get(MicroBatch, key)
    with session_scope(engine) as session:
        again = request_again(session, session.get(MicroBatch, key), now=later, claim_ttl_s=TTL)
        assert again is not None and again.card_ids == [ids[0], ids[2]] and again.request_count == 2
        held = dict(session.execute(sa.select(CardClaim.card_id, CardClaim.batch_key)).all())
    assert held == {ids[0]: key, ids[1]: "mb-other", ids[2]: key}
    with session_scope(engine) as session:  # ... and loses: one request per view of the row
        assert request_again(session, stale_view, now=later, claim_ttl_s=TTL) is None


def test_taking_a_batch_is_a_compare_and_set(engine: sa.Engine) -> None:
    insert_cards(engine, 2)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=2, max_batches=1))
    until = utcnow() + timedelta(seconds=TTL)
    with session_scope(engine) as session:
        assert take_batch(session, key, run_id="run-1", now=utcnow(), lease_until=until)
        assert not take_batch(session, key, run_id="run-2", now=utcnow(), lease_until=until)
        assert not abandon(session, key, reason="a refused run of another", now=utcnow())
        batch = session.get(MicroBatch, key)
        assert not fail_and_retry(
            session, batch, reason="not ours", now=utcnow(), max_attempts=3, claim_ttl_s=TTL, run_id="run-2"
        ).recorded
    with session_scope(engine) as session:
        assert session.get(MicroBatch, key).run_id == "run-1" and session.get(MicroBatch, key).status == "running"


def _another_batch_takes(engine: sa.Engine, card_id: int, *, at) -> None:
    """The batch's claims expired while it waited, and another batch claimed one of its cards."""
    with session_scope(engine) as session:
        session.execute(
            sa.update(CardClaim)
            .where(CardClaim.card_id == card_id)
            .values(batch_key="mb-other", expires_at=at + timedelta(seconds=TTL))
        )


def test_taking_a_batch_shrinks_it_to_the_claims_it_still_holds(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=3, max_batches=1))
    later = utcnow() + timedelta(seconds=TTL + 1)
    _another_batch_takes(engine, ids[1], at=later)
    with session_scope(engine) as session:
        assert take_batch(session, key, run_id="run-1", now=later, lease_until=later + timedelta(seconds=TTL))
    with session_scope(engine) as session:
        assert session.get(MicroBatch, key).card_ids == [ids[0], ids[2]]
        held = dict(session.execute(sa.select(CardClaim.card_id, CardClaim.batch_key)).all())
    assert held == {ids[0]: key, ids[1]: "mb-other", ids[2]: key}


def test_taking_a_batch_whose_every_card_went_elsewhere_refuses_and_abandons_it(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 1)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=1, max_batches=1))
    later = utcnow() + timedelta(seconds=TTL + 1)
    _another_batch_takes(engine, ids[0], at=later)
    with session_scope(engine) as session:
        assert not take_batch(session, key, run_id="run-1", now=later, lease_until=later + timedelta(seconds=TTL))
    with session_scope(engine) as session:
        assert session.get(MicroBatch, key).status == "abandoned"
        assert session.get(CardClaim, ids[0]).batch_key == "mb-other"


def test_renewing_a_lease_shrinks_the_batch_to_the_claims_it_still_holds(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=3, max_batches=1))
    later = utcnow() + timedelta(seconds=TTL + 1)
    _another_batch_takes(engine, ids[2], at=later)
    with session_scope(engine) as session:
        renew_lease(session, key, until=later + timedelta(seconds=TTL))
    with session_scope(engine) as session:
        batch = session.get(MicroBatch, key)
        assert batch.card_ids == ids[:2] and batch.status == "pending"
        held = dict(session.execute(sa.select(CardClaim.card_id, CardClaim.batch_key)).all())
    assert held == {ids[0]: key, ids[1]: key, ids[2]: "mb-other"}


def test_parking_a_batch_parks_only_its_unfinished_cards(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 3)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=3, max_batches=1))
    with session_scope(engine) as session:
        assert take_batch(session, key, run_id="run-1", now=utcnow(), lease_until=utcnow() + timedelta(seconds=TTL))
        # The run finished the first card before it failed, on the batch's last attempt.
        session.execute(sa.update(Card).where(Card.id == ids[0]).values(stage_c_pending=False))
    with session_scope(engine) as session:
        outcome = fail_and_retry(
            session, session.get(MicroBatch, key), reason="RuntimeError: boom", now=utcnow(), max_attempts=1,
            claim_ttl_s=TTL, run_id="run-1",
        )
        assert outcome.recorded and outcome.retry is None
    with session_scope(engine) as session:
        claims = dict(session.execute(sa.select(CardClaim.card_id, CardClaim.batch_key)).all())
    assert claims == {ids[1]: PARKED_KEY, ids[2]: PARKED_KEY}


def test_renewing_never_shortens_a_running_batchs_claims(engine: sa.Engine) -> None:
    ids = insert_cards(engine, 2)
    [(key, _, _)], _ = make(engine, BatchPlan(batch_size=2, max_batches=1))
    far = utcnow() + timedelta(seconds=10 * TTL)
    with session_scope(engine) as session:
        assert take_batch(session, key, run_id="run-1", now=utcnow(), lease_until=far)
        renew_lease(session, key, until=utcnow() + timedelta(seconds=TTL))
    with session_scope(engine) as session:
        expiries = session.execute(sa.select(CardClaim.expires_at).where(CardClaim.card_id.in_(ids))).scalars().all()
    assert len(expiries) == 2 and all(abs((e - far).total_seconds()) < 1 for e in expiries)
