"""What reconciling does with a batch in flight (``dispatch.lifecycle.next_step``), one case per row."""

from __future__ import annotations

from datetime import timedelta

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.models import MicroBatch
from stage_e_dagster.dispatch.backlog_walk import SWEEP_TRIGGER
from stage_e_dagster.dispatch.lifecycle import (
    EXPIRE,
    RENEW,
    REQUEST,
    REQUEST_GRACE,
    WAIT,
    backfill_to_rejoin,
    next_step,
)

NOW = utcnow()


def batch(status: str = "pending", **values: object) -> MicroBatch:
    values = {"trigger_reason": "card-created", "attempt": 1, **values}
    return MicroBatch(batch_key="b", card_ids=[1], status=status, **values)


def step(b: MicroBatch, *, going: bool = False, ended: bool = False, launching: bool = False) -> str:
    return next_step(b, run_going=going, run_ended=ended, backfill_launching=lambda: launching, now=NOW)


def test_a_batch_with_a_run_going_is_renewed_whatever_its_state() -> None:
    assert step(batch("running", lease_expires_at=NOW - timedelta(hours=1)), going=True) == RENEW
    assert step(batch(requested_at=NOW), going=True) == RENEW


def test_a_running_batch_expires_only_past_its_lease_with_no_run_going() -> None:
    assert step(batch("running", lease_expires_at=NOW - timedelta(seconds=1))) == EXPIRE
    assert step(batch("running", lease_expires_at=NOW + timedelta(seconds=1))) == WAIT


def test_a_pending_batch_is_requested_when_never_requested_past_the_grace_or_after_its_run_ended() -> None:
    assert step(batch(requested_at=None)) == REQUEST
    assert step(batch(requested_at=NOW - REQUEST_GRACE - timedelta(seconds=1))) == REQUEST
    assert step(batch(requested_at=NOW), ended=True) == REQUEST
    assert step(batch(requested_at=NOW)) == WAIT


def test_a_sweeps_batch_waits_for_its_backfill_while_the_backfill_launches() -> None:
    swept = batch(requested_at=NOW, trigger_reason=SWEEP_TRIGGER, backfill_id="bf")
    assert step(swept, launching=True) == RENEW
    assert step(swept, launching=False) == REQUEST  # the backfill launches no more: the sensors take it
    assert step(swept, launching=True, ended=True) == REQUEST


def test_a_sweeps_batch_requested_again_rejoins_its_backfill_only_while_it_launches() -> None:
    # Its run failed before taking it (a worker that could not import the code): requested again as a run
    # of the same backfill, whose materialization clears the partition Dagster counted failed.
    swept = batch(requested_at=NOW, trigger_reason=SWEEP_TRIGGER, backfill_id="bf")
    assert backfill_to_rejoin(swept, backfill_launching=lambda: True) == "bf"
    assert backfill_to_rejoin(swept, backfill_launching=lambda: False) is None  # finished: a plain sensor run
    retry = batch(requested_at=NOW, trigger_reason=SWEEP_TRIGGER, backfill_id="bf", attempt=2)
    assert backfill_to_rejoin(retry, backfill_launching=lambda: True) is None  # a key the backfill never targeted
    assert backfill_to_rejoin(batch(requested_at=NOW), backfill_launching=lambda: True) is None
