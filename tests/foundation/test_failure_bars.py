"""The bars of failures that must not hide, and what acknowledging one of their trips gives back.

On both back ends: batches failed in a row for one cause, the share of cards read with an extractor
error, the compare-and-set that puts such cards back after the ack, and the parked cards released.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.evidence_facts import MANIFEST_VERSIONS
from stage_e_dagster.catalog.give_back import reopen_extractor_errors
from stage_e_dagster.catalog.models import Card, CardClaim, EnvelopeTrip, ImageEvidence, MicroBatch, ScanLog
from stage_e_dagster.dispatch.batches import PARKED_KEY, record_batch, take_batch
from stage_e_dagster.dispatch.lifecycle import RunEndFacts, settle_run_end
from stage_e_dagster.envelope.bars import Ceilings
from stage_e_dagster.envelope.failures import cause_of, failed_batch_streak
from stage_e_dagster.envelope.fetch_window import record_fetch_outcome
from stage_e_dagster.envelope.signals import failure_signals
from stage_e_dagster.envelope.trips import acknowledge_trip, check_envelope, current_open_trip
from tests.factories import insert_cards

CEILINGS = Ceilings(host_load=1e9, rss_mb=1e9, fetch_failure_rate=1.0, fetch_failure_window=500)
TTL = 900


def _finished(session, key: str, status: str, reason: str | None, at) -> None:  # type: ignore[no-untyped-def]
    session.add(MicroBatch(batch_key=key, card_ids=[], trigger_reason="card-created", status=status,
                           failure_reason=reason, finished_at=at))


def test_the_cause_masks_what_varies_between_runs() -> None:
    one = "run worker died (signal or OOM): Run execution process for 3f9a2b1c-aaaa-bbbb was terminated by signal 9"
    two = "run worker died (signal or OOM): Run execution process for 77e0c4d2-cccc-dddd was terminated by signal 9"
    assert cause_of(one) == cause_of(two)
    assert cause_of("TextModelUnavailable: the model could not be loaded") != cause_of("KeyError: 'title'")


def test_three_batches_failed_in_a_row_for_one_cause_trip_naming_it(engine: sa.Engine) -> None:
    now = utcnow()
    reason = "TextModelUnavailable: the PP-OCR model could not be loaded: RuntimeError: model {n} missing"
    with session_scope(engine) as session:
        for n in range(2):
            _finished(session, f"b{n}", "failed", reason.format(n=n), now - timedelta(seconds=10 - n))
    with session_scope(engine) as session:
        assert failed_batch_streak(session, longest=3).length == 2
        assert check_envelope(session, failure_signals(session, CEILINGS), CEILINGS) is None  # two is allowed
        _finished(session, "b2", "failed", reason.format(n=2), now)
    with session_scope(engine) as session:
        trip = check_envelope(session, failure_signals(session, CEILINGS), CEILINGS)
        assert trip is not None and trip.bar == "failed_batches"
        assert trip.detail["cause"] == reason.format(n=2)
        assert trip.detail["observed"] == 3 and trip.detail["ceiling"] == 2


def test_a_clean_finish_breaks_the_streak_and_another_cause_neither_counts_nor_breaks_it(engine: sa.Engine) -> None:
    now = utcnow()
    with session_scope(engine) as session:
        _finished(session, "a0", "failed", "KeyError: 'x'", now - timedelta(seconds=9))
        _finished(session, "a1", "failed", "KeyError: 'x'", now - timedelta(seconds=8))
        _finished(session, "ok", "succeeded", None, now - timedelta(seconds=7))  # a bad card, not a broken host
        _finished(session, "a2", "failed", "KeyError: 'x'", now - timedelta(seconds=6))
        _finished(session, "a3", "failed", "KeyError: 'x'", now - timedelta(seconds=5))
        _finished(session, "gone", "abandoned", "run cancelled before it finished", now - timedelta(seconds=4))
    with session_scope(engine) as session:
        assert failed_batch_streak(session, longest=3).batch_keys == ("a3", "a2")  # abandoned neither counts nor breaks
        _finished(session, "other", "failed", "ValueError: y", now - timedelta(seconds=3))
    with session_scope(engine) as session:
        assert failed_batch_streak(session, longest=3).batch_keys == ("a3", "a2")
        assert check_envelope(session, failure_signals(session, CEILINGS), CEILINGS) is None
        _finished(session, "a4", "failed", "KeyError: 'x'", now - timedelta(seconds=2))
    with session_scope(engine) as session:
        trip = check_envelope(session, failure_signals(session, CEILINGS), CEILINGS)
        assert trip is not None and trip.detail["cause"] == "KeyError: 'x'"


def test_after_an_ack_the_failures_before_it_no_longer_count(engine: sa.Engine) -> None:
    now = utcnow()
    with session_scope(engine) as session:
        for n in range(3):
            _finished(session, f"b{n}", "failed", "KeyError: 'x'", now - timedelta(seconds=10 - n))
    with session_scope(engine) as session:
        trip_id = check_envelope(session, failure_signals(session, CEILINGS), CEILINGS).trip_id
    with session_scope(engine) as session:
        acknowledge_trip(session, trip_id, note="fixed", by="tester")
    with session_scope(engine) as session:
        assert failed_batch_streak(session, longest=3).length == 0
        assert check_envelope(session, failure_signals(session, CEILINGS), CEILINGS) is None
        assert current_open_trip(session) is None


def test_the_sixth_card_read_with_an_extractor_error_in_the_window_trips_naming_it(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        for card in range(40):
            error = "title_ocr: KeyError: 'rows'" if card % 8 == 0 else None  # 5 of 40
            record_fetch_outcome(session, "ok", card_id=card, extractor_error=error)
        record_fetch_outcome(session, "rejected", card_id=99, extractor_error=None)
    with session_scope(engine) as session:
        assert check_envelope(session, failure_signals(session, CEILINGS), CEILINGS) is None
        record_fetch_outcome(session, "ok", card_id=41, extractor_error="title_ocr: KeyError: 'rows'")
    with session_scope(engine) as session:
        trip = check_envelope(session, failure_signals(session, CEILINGS), CEILINGS)
        assert trip is not None and trip.bar == "extractor_errors"
        assert trip.detail["cause"] == "title_ocr: KeyError: 'rows'" and trip.detail["observed"] == 6


def _evidence(session, card_id: int, content_hash: str, *, errored: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    versions = dict(MANIFEST_VERSIONS) | errored
    skips = {key: "extractor-error" for key in errored}
    session.add(ImageEvidence(card_id=card_id, content_hash=content_hash, extractor_versions=versions,
                              skip_reasons=skips, writer="dispatch:r"))
    session.execute(sa.update(Card).where(Card.id == card_id).values(content_hash=content_hash,
                                                                     stage_c_pending=False))


def test_the_ack_puts_back_the_cards_read_with_an_extractor_error_at_the_current_manifest(engine: sa.Engine) -> None:
    current, old_version, image_changed, clean = insert_cards(engine, 4)
    with session_scope(engine) as session:
        _evidence(session, current, "h1", errored={"title_ocr": MANIFEST_VERSIONS["title_ocr"]})
        _evidence(session, old_version, "h2", errored={"title_ocr": "title-ocr-v0"})
        _evidence(session, image_changed, "h3", errored={"art_phash": MANIFEST_VERSIONS["art_phash"]})
        _evidence(session, clean, "h4", errored={})
    with session_scope(engine) as session:  # a writer pointed this card at another image since
        session.execute(sa.update(Card).where(Card.id == image_changed).values(content_hash="h3-new"))
    with session_scope(engine) as session:
        assert reopen_extractor_errors(session) == 1
    with session_scope(engine) as session:
        pending = set(session.execute(sa.select(Card.id).where(Card.stage_c_pending.is_(True))).scalars())
        assert current in pending and {old_version, clean}.isdisjoint(pending)
        row = session.execute(sa.select(ImageEvidence).where(ImageEvidence.card_id == current)).scalar_one()
        # Only the errored extractor runs again; every other value stands.
        assert "title_ocr" not in row.extractor_versions
        assert {k: v for k, v in MANIFEST_VERSIONS.items() if k != "title_ocr"} == row.extractor_versions
        changed = session.execute(sa.select(ImageEvidence).where(ImageEvidence.card_id == image_changed)).scalar_one()
        assert changed.extractor_versions["art_phash"] == MANIFEST_VERSIONS["art_phash"]
    with session_scope(engine) as session:
        assert reopen_extractor_errors(session) == 0  # done once: nothing left at the current manifest


def test_the_reopening_is_a_compare_and_set_on_what_it_read(engine: sa.Engine) -> None:
    """A row rewritten between the read and the write (a run that re-read the card) is left to its writer."""
    [card] = insert_cards(engine, 1)
    with session_scope(engine) as session:
        _evidence(session, card, "h1", errored={"title_ocr": MANIFEST_VERSIONS["title_ocr"]})
    with session_scope(engine) as session:
        real_execute = session.execute
        rewritten: list[bool] = []

        def execute_after_a_rewrite(statement, *args, **kwargs):  # type: ignore[no-untyped-def]
            if isinstance(statement, sa.Update) and statement.table.name == "image_evidence" and not rewritten:
                rewritten.append(True)  # another writer merges a clean read of the extractor first
                real_execute(sa.update(ImageEvidence).where(ImageEvidence.card_id == card)
                             .values(skip_reasons={}))
            return real_execute(statement, *args, **kwargs)

        session.execute = execute_after_a_rewrite  # type: ignore[method-assign]
        assert reopen_extractor_errors(session) == 0
    with session_scope(engine) as session:
        row = session.execute(sa.select(ImageEvidence)).scalar_one()
        assert row.extractor_versions["title_ocr"] == MANIFEST_VERSIONS["title_ocr"]
        assert session.get(Card, card).stage_c_pending is False


def test_a_third_failure_in_a_row_trips_in_the_transaction_that_parks_and_the_ack_gives_the_cards_back(
    engine: sa.Engine,
) -> None:
    ids = insert_cards(engine, 3)
    now = utcnow()
    reason = "TextModelUnavailable: the PP-OCR model could not be loaded"
    for n, card in enumerate(ids):
        with session_scope(engine) as session:
            key = f"mb-20260101T00000{n}-0000000{n}"
            record_batch(session, [card], trigger_reason="card-created", now=now, claim_ttl_s=TTL, key=key)
            assert take_batch(session, key, run_id=f"run-{n}", now=now, lease_until=now + timedelta(hours=1))
        facts = RunEndFacts(run_id=f"run-{n}", status="failure", cancelled=False, refused_at_gate=None,
                            timed_out=None, failure_reason=lambda: reason, may_be_live=lambda: False,
                            created_at=now)
        with session_scope(engine) as session:
            settled = settle_run_end(session, key, facts, now=now + timedelta(seconds=n), max_attempts=1,
                                     claim_ttl_s=TTL, ceilings=CEILINGS)
            assert settled.recorded
            assert (current_open_trip(session) is not None) == (n == 2), settled.note
    with session_scope(engine) as session:
        trip = session.execute(sa.select(EnvelopeTrip)).scalar_one()
        assert trip.bar == "failed_batches" and trip.detail["cause"] == reason and trip.run_id == "run-2"
        parked = session.execute(sa.select(CardClaim.card_id).where(CardClaim.batch_key == PARKED_KEY)).scalars()
        assert sorted(parked) == ids
        assert session.execute(sa.select(sa.func.count()).select_from(ScanLog)).scalar_one() == 3
        acked = acknowledge_trip(session, trip.trip_id, note="model restored", by="tester")
        assert acked.detail["given_back"] == {"parked_cards": 3, "extractor_error_cards": 0}
    with session_scope(engine) as session:
        assert session.execute(sa.select(sa.func.count()).select_from(CardClaim)).scalar_one() == 0
        pending = session.execute(sa.select(Card.id).where(Card.stage_c_pending.is_(True))).scalars()
        assert sorted(pending) == ids
