"""Failures that cannot hide (issue 40 part 5), with the real daemon and run workers.

ONNX Runtime is broken in every process the daemon starts by ``onnx_fault/sitecustomize.py`` on their
``PYTHONPATH`` (no hook in the product): the model fails on every crop, or cannot load. Each opens one
``failed_batches`` trip naming the cause before more than a batch's worth of cards is tried; after
the fix and the acknowledgement every card is read, none left parked.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import CardClaim, EnvelopeTrip, ImageEvidence, MicroBatch
from stage_e_dagster.defs.run_ends import runs_in_progress
from stage_e_dagster.dispatch.batches import PARKED_KEY

from .test_daemon import Stack, assert_no_duplicates, sensor_ticks, sqlite_stack_for

pytestmark = pytest.mark.slow

FAULT_DIR = Path(__file__).parent / "onnx_fault"
BATCH = 5
CAUSES = {"run": "injected: ONNX Runtime fails on every crop", "load": "injected: the model file does not load"}


def _trips(stack: Stack) -> list[EnvelopeTrip]:
    with session_scope(stack.engine) as session:
        trips = session.execute(sa.select(EnvelopeTrip).order_by(EnvelopeTrip.id)).scalars().all()
        session.expunge_all()
        return list(trips)


def _parked(stack: Stack) -> int:
    with session_scope(stack.engine) as session:
        return session.execute(
            sa.select(sa.func.count()).select_from(CardClaim).where(CardClaim.batch_key == PARKED_KEY)
        ).scalar_one()


def _quiet(stack: Stack, *, pending_too: bool = True) -> bool:
    """No run going and no batch running (nor, with ``pending_too``, waiting): what failed is settled.
    While a trip is open the retries of failed batches wait, pending, for the ack."""
    with session_scope(stack.engine) as session:
        statuses = ("pending", "running") if pending_too else ("running",)
        if session.execute(sa.select(sa.func.count()).select_from(MicroBatch)
                           .where(MicroBatch.status.in_(statuses))).scalar_one():
            return False
    if stack._runs is None:
        stack._runs = stack.instance()
    return runs_in_progress(stack._runs) == 0


def _failed_batches(stack: Stack) -> list[tuple[str, int, str, datetime]]:
    with session_scope(stack.engine) as session:
        return [tuple(row) for row in session.execute(  # type: ignore[misc]
            sa.select(MicroBatch.batch_key, MicroBatch.attempt, MicroBatch.failure_reason, MicroBatch.finished_at)
            .where(MicroBatch.status == "failed").order_by(MicroBatch.finished_at)
        ).all()]


def _wait_for_a_sensor_pass(stack: Stack, since: float) -> None:
    """Until the dispatch and envelope sensors have each finished a tick begun after ``since``."""
    instance = stack.instance()
    try:
        stack.wait_until(
            lambda: all(any(t.timestamp > since and t.status.value != "STARTED" for t in sensor_ticks(instance, name))
                        for name in ("card_created_sensor", "envelope_trip_sensor")),
            timeout_s=120, what="a dispatch and an envelope sensor tick begun with the trip open")
    finally:
        instance.dispose()


def _tried_before(log: Path, when: datetime) -> int:
    """Cards whose read the fault failed before ``when`` (each failed run stops at its first card)."""
    stamps = [float(line.split()[0]) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    return sum(1 for stamp in stamps if stamp < when.timestamp())


@pytest.mark.parametrize("fault", ["run", "load"])
def test_a_broken_model_opens_one_trip_naming_it_and_after_the_fix_and_the_ack_every_card_is_read(
    corpus_template: Path, tmp_path: Path, fault: str
) -> None:
    flag, log = tmp_path / "model-broken", tmp_path / "fault.log"
    flag.touch()
    stack = sqlite_stack_for(corpus_template, tmp_path, batch_size=BATCH, cap=2)
    stack.env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(FAULT_DIR), os.environ.get("PYTHONPATH")])),
        "ONNX_FAULT_FLAG": str(flag), "ONNX_FAULT_KIND": fault,
        "ONNX_FAULT_LOG": str(log),
        # Two attempts: the failure that trips is a retry's, so it also parks its cards, which the ack
        # must give back. (The shipped three attempts trip before any batch parks.)
        "STAGE_E_MAX_BATCH_ATTEMPTS": "2" if fault == "load" else "3",
    })
    try:
        cards = stack.counts()["cards"]
        stack.start()
        trip_open = lambda: any(t.acknowledged_at is None for t in _trips(stack))  # noqa: E731
        # Before the fix nothing trips: every batch fails until its cards are parked and all is quiet.
        stack.wait_until(lambda: trip_open() or (_quiet(stack) and bool(_failed_batches(stack))), timeout_s=240,
                         what="a trip, or every batch failed and settled")
        failed = _failed_batches(stack)
        assert trip_open(), (
            f"no trip opened: {len(failed)} batch(es) failed, {_parked(stack)} of {cards} cards parked; "
            f"failures: {[(key, attempt, (reason or '')[:120]) for key, attempt, reason, _ in failed]}"
        )
        stack.wait_until(lambda: _quiet(stack, pending_too=False), timeout_s=120,
                         what="the runs in flight at the trip to end")
        [trip] = _trips(stack)
        print(f"\n{fault}: trip {trip.trip_id} bar {trip.bar} cause {trip.detail.get('cause')!r}; "
              f"{_tried_before(log, trip.tripped_at)} card(s) tried before it, {len(failed)} failed batch(es), "
              f"{_parked(stack)} card(s) parked; trip by run {trip.run_id} at {trip.tripped_at}; failed: "
              f"{[(key[-12:], attempt, str(at), (why or '')[:100]) for key, attempt, why, at in _failed_batches(stack)]}")
        assert trip.bar == "failed_batches"
        assert CAUSES[fault] in trip.detail["cause"]
        assert trip.detail["observed"] == 3.0 and trip.detail["ceiling"] == 2.0
        assert 1 <= _tried_before(log, trip.tripped_at) <= BATCH, "more than a batch's worth of cards tried"
        with session_scope(stack.engine) as session:  # nothing read: only a broken upload's terminal record
            read = session.execute(sa.select(sa.func.count()).select_from(ImageEvidence)
                                   .where(ImageEvidence.terminal.is_(False))).scalar_one()
        assert read == 0
        if fault == "load":
            assert _parked(stack) > 0
        # A whole pass of the dispatch and envelope sensors with the trip open: still one trip.
        _wait_for_a_sensor_pass(stack, since=time.time())
        assert len(_trips(stack)) == 1

        flag.unlink()  # the fix
        acked = stack.stage_e("trips", "ack", trip.trip_id, "--note", "model restored")
        assert acked.returncode == 0, acked.stderr
        assert "given back to the Stage C backlog" in acked.stdout, acked.stdout
        stack.wait_until(stack.idle, timeout_s=300, what="every card read after the fix and the ack")
        after = stack.counts()
        assert after["evidence_cards"] == cards and after["waiting"] == 0
        assert _parked(stack) == 0
        with session_scope(stack.engine) as session:
            skips = session.execute(sa.select(ImageEvidence.skip_reasons)).scalars().all()
        assert not [s for s in skips if "extractor-error" in (s or {}).values()]
        trips = _trips(stack)
        assert len(trips) == 1 and trips[0].acknowledged_at is not None
        assert_no_duplicates(stack.engine)
    finally:
        stack.stop()
        stack.engine.dispose()
