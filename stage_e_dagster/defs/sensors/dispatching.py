"""The tick both dispatch sensors share, in five phases: gate, settle, steer, plan, emit.

- gate (``hold_or_release``): may this tick dispatch at all? An open trip holds the pool; none
  releases a finished hold.
- settle (``settle_in_flight``, ``card_created_sensor`` only): which batches in flight are due a
  request? Renews leases, settles missed run ends, rolls a new extractor manifest out and puts back
  the cards refused under other settings, so one place requests a batch again.
- steer (``governed_limit``): how many dispatch runs may go at once? The contention governor decides
  while work waits or runs, and the pool follows its decision.
- plan (``batches_to_request``): which batches does this tick request? The due ones first, then new
  batches for the slots left free, after a watch for the next card when the tick finds nothing.
- emit (``tick_result``): the run requests, their partitions and the cursor, or why there are none.

Dagster's facts (the runs going, the pool's limit) are read in ``defs/run_queue.py``; what they allow
is decided in ``dispatch/``. Echo is prevented by claims, not by who wrote last: a card held by a
live batch is not eligible, and every unclaimed card in the tick's backlog is, whoever wrote it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime

import sqlalchemy as sa
from dagster import DagsterInstance, RunRequest, SensorEvaluationContext, SensorResult, SkipReason

from ...catalog.backlog import requeue_config_refused
from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...catalog.models import MicroBatch
from ...dispatch.arrivals import wait_for_work
from ...dispatch.batches import NewBatches, create_batches
from ...dispatch.guard import FLAG_OFF, check_gate
from ...dispatch.keys import run_key
from ...dispatch.sizing import BatchPlan, max_batches_per_tick, plan_for_tick, within_tick
from ...dispatch.slots import RunQueue, Slots, slots_under
from ...settings import Settings, settings_fingerprint
from ...stage_c.rollout import rollout_step
from ..contention import (
    governor_observation,
    has_batch_in_flight,
    has_unclaimed,
    standing_limit,
    steer_by_contention,
)
from ..hold import apply_pool_setting, hold_dispatch, release_hold
from ..partitions import micro_batches
from ..reconcile import Reconciled, reconcile, request_due
from ..resources import StageEResource
from ..run_queue import dispatch_cap, read_run_queue
from ..sensor_context import sensor_instance
from ..tags import BACKFILL_TAG, dispatch_tags

# How often the dispatch and envelope sensors may tick: every pass of the sensor daemon. Its loop
# takes at least 5 s (Dagster's MIN_INTERVAL_LOOP_TIME); a minimum interval of exactly 5 s skips
# any tick that starts a little earlier in its pass than the last one did, so the sensor then ticks
# every 10 s, which alone added ~5 s to a trickled card's wait.
EVERY_DAEMON_PASS_S = 4


@dataclass
class Tick:
    """One evaluation: what every phase reads, and what the phases found to say. ``notes`` are the tick's
    own (roll-out, settings, governor), logged in one line before reconciling's; ``settled`` holds what
    reconciling found: the batches due a request, its notes, and the ledger's asset events."""

    context: SensorEvaluationContext
    engine: sa.Engine
    instance: DagsterInstance
    settings: Settings
    predicate: sa.ColumnElement[bool]
    trigger_reason: str
    owns_reconcile: bool
    use_cursor: bool
    notes: list[str] = field(default_factory=list)
    settled: Reconciled = field(default_factory=Reconciled)

    @property
    def seeds_after(self) -> int:
        """The newest card id requested so far (0 without a cursor)."""
        return int(self.context.cursor) if self.use_cursor and self.context.cursor else 0

    def say(self) -> None:
        if self.notes or self.settled.notes:
            self.context.log.info("; ".join(self.notes + self.settled.notes))

    def skip(self, reason: str, cursor: str | None) -> SensorResult:
        """No request; what reconciling settled still goes in the ledger."""
        return SensorResult(skip_reason=reason, asset_events=self.settled.observations, cursor=cursor)

    def cursor_unmoved(self) -> str | None:
        return self.context.cursor if self.use_cursor else None


@dataclass(frozen=True)
class DispatchLimit:
    """What steering decided: the concurrency dispatch may have (``governed``), the run queue as read with
    the pool's limit as steering left it, or the trip that stops the tick."""

    governed: int
    queue: RunQueue
    trip_reason: str | None = None


@dataclass(frozen=True)
class Chosen:
    """The batches this tick requests: ``requeue`` (due again), then ``fresh`` (new), under ``plan`` and
    ``slots`` as they stood when the new batches were made; ``closed`` says why a watch ended the tick."""

    requeue: list[MicroBatch]
    fresh: NewBatches
    plan: BatchPlan
    slots: Slots
    closed: str | None = None


def run_request(settings: Settings, batch: MicroBatch, backfill_id: str | None = None) -> RunRequest:
    """One run for the batch, keyed by the batch and the number of this request (``dispatch.keys.run_key``);
    with ``backfill_id``, a run of that sweep backfill (Dagster's tag), so its materializations are the
    backfill's and clear a partition an earlier run of it failed (``dispatch.lifecycle.backfill_to_rejoin``)."""
    tags = dispatch_tags(settings, trigger_reason=batch.trigger_reason, attempt=batch.attempt)
    if backfill_id is not None:
        tags[BACKFILL_TAG] = backfill_id
    return RunRequest(run_key=run_key(batch.batch_key, batch.request_count), partition_key=batch.batch_key, tags=tags)


def dispatch_tick(
    context: SensorEvaluationContext,
    stage_e: StageEResource,
    *,
    predicate: sa.ColumnElement[bool],
    trigger_reason: str,
    owns_reconcile: bool,
    use_cursor: bool,
    wait_for_arrivals: bool = False,
) -> SensorResult | SkipReason:
    """``wait_for_arrivals``: an idle tick watches the backlog for ``STAGE_E_ARRIVAL_WAIT_S`` before it
    returns (``dispatch.arrivals``), so a card landing between the daemon's passes is batched at once,
    and a tail split off to the free slot meanwhile is requested at once."""
    started = time.monotonic()
    settings = stage_e.settings()
    if not settings.streaming_enabled:
        return SkipReason(FLAG_OFF)
    engine = stage_e.engine()
    instance = sensor_instance(context)
    tick = Tick(context, engine, instance, under_run_queue_cap(instance, settings), predicate, trigger_reason,
                owns_reconcile, use_cursor)
    held = hold_or_release(tick)
    if held is not None:
        return SkipReason(held)
    now = utcnow()
    if owns_reconcile:
        settle_in_flight(tick, now=now)
    limit = governed_limit(tick, now=now)
    if limit.trip_reason is not None:
        return tick.skip(limit.trip_reason, tick.cursor_unmoved())
    # The watch counts from the tick's start, so a tick never outlasts the daemon's pass because
    # reconciling was slow.
    chosen = batches_to_request(tick, limit, watch_s=settings.arrival_wait_s if wait_for_arrivals else 0.0,
                                started=started, now=now)
    return tick_result(tick, chosen)


def under_run_queue_cap(instance: DagsterInstance, settings: Settings) -> Settings:
    """The settings with the dispatch cap left within the run queue's own cap, room kept for the
    acknowledge job (``run_queue.dispatch_cap``)."""
    cap = dispatch_cap(instance, settings.max_concurrent_dispatches)
    if cap == settings.max_concurrent_dispatches:
        return settings
    return settings.model_copy(update={"max_concurrent_dispatches": cap})


def hold_or_release(tick: Tick) -> str | None:
    """Gate: why this tick may not dispatch (a trip open or just opened: the pool held, queued sensor runs
    cancelled), or ``None`` when it may, any hold whose trip was acknowledged released first."""
    with session_scope(tick.engine) as session:
        verdict = check_gate(session, tick.settings)
    if verdict.allowed:
        release_hold(tick.instance, tick.engine, cap=tick.settings.max_concurrent_dispatches)
        return None
    if verdict.trip_id:
        cancelled = hold_dispatch(tick.instance, tick.engine, trip_id=verdict.trip_id, reason=verdict.reason)
        if cancelled:
            return f"{verdict.reason}; cancelled {cancelled} queued dispatch run(s)"
    return verdict.reason


def settle_in_flight(tick: Tick, *, now: datetime) -> None:
    """Settle: roll a new extractor manifest out a step, put back the cards refused under other settings,
    and reconcile the batches in flight (renew, settle missed run ends); the batches due a request go in
    ``tick.settled``."""
    with session_scope(tick.engine) as session:
        step = rollout_step(session, now=now)
        allowed = requeue_config_refused(session, settings_fingerprint(tick.settings))
    if step.requeued:
        tick.notes.append(f"extractor manifest rollout: {step.requeued} card(s) back in the Stage C backlog")
    if allowed:
        tick.notes.append(f"settings changed: {allowed} card(s) waiting on configuration back in the Stage C backlog")
    tick.settled = reconcile(tick.instance, tick.engine, tick.settings, now=now)


def governed_limit(tick: Tick, *, now: datetime) -> DispatchLimit:
    """Steer: how many dispatch runs may go at once. With work in hand (a batch due, a card waiting, a
    batch in flight) the governor samples contention, at most once per ``STEER_EVERY`` whoever ticks;
    otherwise the standing decision holds. The pool then follows it, so the backfill daemon starts a
    sweep's runs under it too; an operator's own pool limit is kept."""
    engine, settings = tick.engine, tick.settings
    queue = read_run_queue(tick.instance)
    governed = standing_limit(engine, settings.max_concurrent_dispatches)
    if tick.settled.due or has_unclaimed(engine, tick.predicate, now=now) or has_batch_in_flight(engine):
        steering = steer_by_contention(engine, settings, own_running=queue.running, now=now)
        if steering.trip_id is not None:
            opened = f"{steering.governed.reason}: opened trip {steering.trip_id}"
            return DispatchLimit(governed, queue, trip_reason=opened)
        if steering.changed:
            tick.notes.append(steering.governed.reason)
            tick.settled.observations.append(governor_observation(steering))
        governed = steering.governed.limit
    return DispatchLimit(governed, replace(queue, pool_limit=apply_pool_setting(tick.instance, engine, governed)))


def batches_to_request(tick: Tick, limit: DispatchLimit, *, watch_s: float, started: float, now: datetime) -> Chosen:
    """Plan: the batches due a request (marked requested only now that the tick emits them, and no more
    than it emits: a batch marked and left out waits ``REQUEST_GRACE``), then new batches for the slots
    left free. A tick that finds nothing with a slot free watches its backlog until ``started + watch_s``
    and plans once more with the card that landed or the batch split off meanwhile."""
    per_tick = max_batches_per_tick(tick.settings)
    requeue = request_due(tick.engine, tick.settings, tick.settled.due, now=now, limit=per_tick)
    slots = slots_under(limit.governed, limit.queue)
    # Watch only while a card that lands could start at once: with every slot running, it would wait
    # for a slot anyway, and the next tick batches it in time.
    watch_until = started + (watch_s if slots.free(len(requeue)) else 0.0)
    chosen = _new_batches(tick, requeue, slots, now=now)
    # Idle with free slots: watch for the next card (or a batch to request) until the watch ends, then
    # batch it (or request it) in this tick. A watch whose card could not be claimed (another selector
    # won it, or on PostgreSQL another transaction holds its row and SKIP LOCKED passes it by) ends
    # there: probing again would find the same row every POLL_S until the watch ran out.
    if chosen.fresh.batches or requeue or chosen.plan.max_batches == 0 or time.monotonic() >= watch_until:
        return chosen
    if not wait_for_work(tick.engine, tick.predicate, until=watch_until):
        return chosen
    now = utcnow()
    with session_scope(tick.engine) as session:
        verdict = check_gate(session, tick.settings)
    if not verdict.allowed:  # a trip opened or streaming went off while watching: the next tick holds
        return replace(chosen, closed=verdict.reason)
    if tick.owns_reconcile:  # a tail split off (or a retry recorded) while the tick watched is requested now
        again = reconcile(tick.instance, tick.engine, tick.settings, now=now)
        tick.settled.observations += again.observations
        tick.settled.notes += again.notes
        tick.settled.backfills.update(again.backfills)
        requeue += request_due(tick.engine, tick.settings, again.due, now=now, limit=per_tick - len(requeue))
    # Runs started or ended while the tick watched: plan the card with the runs and slots of now.
    return _new_batches(tick, requeue, slots_under(limit.governed, read_run_queue(tick.instance)), now=now)


def _new_batches(tick: Tick, requeue: list[MicroBatch], slots: Slots, *, now: datetime) -> Chosen:
    """New batches for the slots ``slots`` leaves free beside ``requeue``, committed with their claims."""
    with session_scope(tick.engine) as session:
        plan = plan_for_tick(
            tick.settings, in_flight_runs=slots.in_flight + len(requeue), cap=slots.cap,
            queue_ahead=slots.queue_ahead, session=session, predicate=tick.predicate, now=now,
        )
        plan = within_tick(plan, tick.settings, requested=len(requeue))
        fresh = create_batches(
            session,
            tick.predicate,
            plan,
            trigger_reason=tick.trigger_reason,
            now=now,
            claim_ttl_s=tick.settings.claim_ttl_s,
            seeds_after=tick.seeds_after if tick.use_cursor else None,
        )
    return Chosen(requeue, fresh, plan, slots)


def tick_result(tick: Tick, chosen: Chosen) -> SensorResult:
    """Emit: one run request and one new partition per batch, the cursor past the newest card requested;
    or, with no batch, a skip reason that names what the tick saw."""
    tick.say()
    if chosen.closed is not None:
        return tick.skip(chosen.closed, tick.cursor_unmoved())
    seeds_after = tick.seeds_after
    cursor = str(max(seeds_after, chosen.fresh.highest_seed_id or 0)) if tick.use_cursor else None
    batches = chosen.requeue + chosen.fresh.batches
    if not batches:
        if chosen.plan.max_batches == 0:
            return tick.skip(chosen.slots.full_reason(), cursor)
        seen = f" (newest seen id {seeds_after})" if tick.use_cursor else ""
        return tick.skip(f"no unclaimed cards waiting for {tick.trigger_reason}{seen}", cursor)
    return SensorResult(
        run_requests=[run_request(tick.settings, b, tick.settled.backfills.get(b.batch_key)) for b in batches],
        dynamic_partitions_requests=[micro_batches.build_add_request([b.batch_key for b in batches])],
        asset_events=tick.settled.observations,
        cursor=cursor,
    )
