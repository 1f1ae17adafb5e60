"""What the run queue's facts allow a tick (``dispatch/slots.py``), decided from plain numbers."""

from __future__ import annotations

from stage_e_dagster.dispatch.keys import run_key
from stage_e_dagster.dispatch.sizing import MIN_BATCHES_PER_TICK, BatchPlan, within_tick
from stage_e_dagster.dispatch.slots import ACK_ROOM, RunQueue, Slots, cap_within_run_queue, slots_under
from stage_e_dagster.settings import Settings


def test_the_cap_leaves_the_run_queue_room_for_the_acknowledge_job_and_never_drops_below_one() -> None:
    assert cap_within_run_queue(16, None) == 16  # an unlimited run queue
    assert cap_within_run_queue(16, 5) == 5 - ACK_ROOM
    assert cap_within_run_queue(2, 5) == 2
    assert cap_within_run_queue(4, 1) == 1
    # The run queue's own limit on dispatch runs (the dagster/partition tag limit) bounds it too.
    assert cap_within_run_queue(16, 17, 4) == 4 and cap_within_run_queue(16, None, 4) == 4
    assert cap_within_run_queue(2, 3, 8) == 2


def test_the_lower_of_the_governed_concurrency_and_the_pools_own_limit_caps_the_tick() -> None:
    assert slots_under(3, RunQueue(going=1, running=1, pool_limit=None)) == Slots(3, queue_ahead=False, in_flight=1)
    # The pool is the limit: a run queued behind each running one waits for its slot in Dagster's queue.
    assert slots_under(4, RunQueue(going=2, running=2, pool_limit=2)) == Slots(2, queue_ahead=True, in_flight=2)
    assert slots_under(3, RunQueue(going=0, running=0, pool_limit=3)).queue_ahead
    # Governed below an operator's own limit: the sensor alone keeps the count.
    assert slots_under(3, RunQueue(going=0, running=0, pool_limit=5)) == Slots(3, queue_ahead=False, in_flight=0)


def test_a_slot_is_free_only_beside_what_is_in_flight_and_what_the_tick_requests() -> None:
    slots = Slots(cap=2, queue_ahead=True, in_flight=1)
    assert slots.free(0) and not slots.free(1)
    assert slots.full_reason() == (
        "1 dispatch run(s) queued or going, the most for a limit of 2 (one queued behind each running)"
    )
    assert Slots(cap=1, queue_ahead=False, in_flight=1).full_reason().endswith("the most for a limit of 1")


def test_a_batch_requested_again_carries_the_number_of_its_request() -> None:
    assert run_key("mb-20261206T101010-0a1b2c3d", 1) == "mb-20261206T101010-0a1b2c3d"
    assert run_key("mb-20261206T101010-0a1b2c3d", 3) == "mb-20261206T101010-0a1b2c3d@3"


def test_new_batches_share_the_ticks_bound_with_the_batches_it_requests_again() -> None:
    settings = Settings(max_concurrent_dispatches=2)  # the tick's bound is MIN_BATCHES_PER_TICK
    plan = BatchPlan(batch_size=10, max_batches=MIN_BATCHES_PER_TICK - 2)
    assert within_tick(plan, settings, requested=0).max_batches == MIN_BATCHES_PER_TICK - 2
    assert within_tick(plan, settings, requested=5).max_batches == MIN_BATCHES_PER_TICK - 5
