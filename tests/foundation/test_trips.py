"""Trips on both back ends: ids, the global open check, acknowledgement, no self-resume."""

import re

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import EnvelopeTrip
from stage_e_dagster.envelope.bars import Ceilings, EnvelopeSignals
from stage_e_dagster.envelope.fetch_window import prune_fetch_outcomes, record_fetch_outcome, window_counts
from stage_e_dagster.envelope.trips import (
    EmptyNote,
    TripAlreadyAcknowledged,
    TripNotFound,
    acknowledge_trip,
    check_envelope,
    current_open_trip,
    open_trip,
)

CEILINGS = Ceilings(host_load=7.0, rss_mb=512.0, fetch_failure_rate=0.01, fetch_failure_window=500)


def test_a_breach_persists_a_trip_with_its_id_bar_values_and_run(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        trip = check_envelope(session, EnvelopeSignals(host_load=8.25), CEILINGS, run_id="run-1")
        assert trip is not None
    with session_scope(engine) as session:
        stored = session.execute(sa.select(EnvelopeTrip)).scalar_one()
        assert re.fullmatch(r"envtrip-\d{8}T\d{6}-[0-9a-f]{8}", stored.trip_id)
        assert stored.bar == "host_load"
        assert stored.detail["observed"] == 8.25 and stored.detail["ceiling"] == 7.0
        assert stored.run_id == "run-1"
        assert stored.tripped_at.tzinfo is not None
        assert stored.acknowledged_at is None


def test_healthy_signals_write_no_trip(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        assert check_envelope(session, EnvelopeSignals(host_load=7.0, rss_mb=512.0), CEILINGS) is None
        assert current_open_trip(session) is None


def test_the_open_trip_check_is_global_across_runs(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        open_trip(session, "rss", {"observed": 600, "ceiling": 512}, run_id="someone-elses-run")
    with session_scope(engine) as session:
        trip = current_open_trip(session)
        assert trip is not None and trip.run_id == "someone-elses-run"


def test_only_acknowledgement_closes_a_trip_and_it_records_who_and_when(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        trip_id = open_trip(session, "fetch_lockout", {"observed": 1, "ceiling": 0}).trip_id
    # New healthy samples never clear it: there is no self-resume.
    for _ in range(3):
        with session_scope(engine) as session:
            assert check_envelope(session, EnvelopeSignals(host_load=0.1), CEILINGS) is None
            assert current_open_trip(session).trip_id == trip_id
    with session_scope(engine) as session:
        acked = acknowledge_trip(session, trip_id, note="  host unblocked  ", by="alice")
        assert acked.acknowledged_by == "alice" and acked.acknowledged_note == "host unblocked"
    with session_scope(engine) as session:
        assert current_open_trip(session) is None
        assert session.execute(sa.select(EnvelopeTrip)).scalar_one().acknowledged_at is not None


def test_acknowledge_errors(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        trip_id = open_trip(session, "manual", {"note": "maintenance"}).trip_id
    with pytest.raises(EmptyNote):
        with session_scope(engine) as session:
            acknowledge_trip(session, trip_id, note="   ", by="bob")
    with pytest.raises(TripNotFound):
        with session_scope(engine) as session:
            acknowledge_trip(session, "envtrip-19700101T000000-00000000", note="x", by="bob")
    with session_scope(engine) as session:
        acknowledge_trip(session, trip_id, note="done", by="bob")
    with pytest.raises(TripAlreadyAcknowledged):
        with session_scope(engine) as session:
            acknowledge_trip(session, trip_id, note="again", by="bob")


def test_with_two_open_trips_one_ack_leaves_dispatch_halted(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        first = open_trip(session, "host_load", {"observed": 9, "ceiling": 7}).trip_id
        second = open_trip(session, "manual", {"note": "pause"}).trip_id
    with session_scope(engine) as session:
        acknowledge_trip(session, second, note="ok", by="carol")
    with session_scope(engine) as session:
        assert current_open_trip(session).trip_id == first


def test_fetch_window_counts_only_the_newest_outcomes_and_not_throttles(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        for _ in range(6):
            record_fetch_outcome(session, "failed", status_code=404)
        for _ in range(10):
            record_fetch_outcome(session, "throttled", status_code=429)
        for _ in range(8):
            record_fetch_outcome(session, "ok", status_code=200)
    with session_scope(engine) as session:
        assert window_counts(session, 500) == (window_counts(session, 500).__class__(failures=6, total=24))
        assert window_counts(session, 18).failures == 0  # the six failures fell out of a window of 18
        assert window_counts(session, 19).failures == 1
        assert prune_fetch_outcomes(session, keep=10) == 14
        assert window_counts(session, 500).total == 10
    with pytest.raises(ValueError):
        with session_scope(engine) as session:
            record_fetch_outcome(session, "exploded")


def test_an_automatic_bar_has_one_open_trip_and_manual_trips_are_each_their_own(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        first = open_trip(session, "fetch_lockout", {"observed": 1, "ceiling": 0}, run_id="run-a").trip_id
    with session_scope(engine) as session:  # a second run meets the same lockout
        second = open_trip(session, "fetch_lockout", {"observed": 1, "ceiling": 0}, run_id="run-b").trip_id
        manual = [open_trip(session, "manual", {"note": n}).trip_id for n in ("one", "two")]
    assert second == first and len(set(manual)) == 2
    with session_scope(engine) as session:
        acknowledge_trip(session, first, note="host unblocked us", by="ops")
    with session_scope(engine) as session:  # after the ack, a new lockout is a new trip
        assert open_trip(session, "fetch_lockout", {"observed": 1, "ceiling": 0}).trip_id != first
