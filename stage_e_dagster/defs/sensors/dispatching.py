"""The tick both dispatch sensors share: gate, hold or release, then new batches for the free slots.

Echo is prevented by claims, not by who wrote last: a card held by a live batch is not eligible,
and every unclaimed card in the tick's backlog is, whoever wrote it. Only ``card_created_sensor``
reconciles the batches in flight (renewals, settling missed run ends, requests again), rolls a
new extractor manifest out and puts back the cards refused under other settings, so one place
requests a batch again.
"""

from __future__ import annotations

import time
from dataclasses import replace

import sqlalchemy as sa
from dagster import RunRequest, SensorEvaluationContext, SensorResult, SkipReason

from ...catalog.backlog import requeue_config_refused
from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...catalog.models import MicroBatch
from ...dispatch.arrivals import wait_for_work
from ...dispatch.batches import create_batches
from ...dispatch.guard import FLAG_OFF, check_gate
from ...dispatch.sizing import max_batches_per_tick, plan_for_tick
from ...settings import Settings, settings_fingerprint
from ...stage_c.rollout import rollout_step
from ..contention import (
    governor_observation,
    has_batch_in_flight,
    has_unclaimed,
    standing_limit,
    steer_by_contention,
)
from ..dagster_internals import ACTIVE_RUN_STATUSES
from ..hold import active_dispatch_runs, apply_pool_setting, dispatch_cap, hold_dispatch, pool_limit, release_hold
from ..partitions import micro_batches
from ..reconcile import Reconciled, reconcile, request_due
from ..resources import StageEResource
from ..sensor_context import sensor_instance
from ..tags import dispatch_tags

# How often the dispatch and envelope sensors may tick: every pass of the sensor daemon. Its loop
# takes at least 5 s (Dagster's MIN_INTERVAL_LOOP_TIME); a minimum interval of exactly 5 s skips
# any tick that starts a little earlier in its pass than the last one did, so the sensor then ticks
# every 10 s, which alone added ~5 s to a trickled card's wait.
EVERY_DAEMON_PASS_S = 4
# Runs with a worker (or getting one): Dagster's own grouping.
RUNNING = ACTIVE_RUN_STATUSES


def run_request(settings: Settings, batch: MicroBatch) -> RunRequest:
    """One run for the batch. A run key is never reusable, even after a failed run, so a batch
    requested again carries the number of that request in its key."""
    return RunRequest(
        run_key=batch.batch_key if batch.request_count <= 1 else f"{batch.batch_key}@{batch.request_count}",
        partition_key=batch.batch_key,
        tags=dispatch_tags(settings, trigger_reason=batch.trigger_reason, attempt=batch.attempt),
    )


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
    # The cap leaves the run queue's own cap room for the acknowledge job (``hold.dispatch_cap``).
    cap_setting = dispatch_cap(instance, settings.max_concurrent_dispatches)
    if cap_setting != settings.max_concurrent_dispatches:
        settings = settings.model_copy(update={"max_concurrent_dispatches": cap_setting})
    with session_scope(engine) as session:
        verdict = check_gate(session, settings)
    if not verdict.allowed:
        if verdict.trip_id:
            cancelled = hold_dispatch(instance, engine, trip_id=verdict.trip_id, reason=verdict.reason)
            if cancelled:
                return SkipReason(f"{verdict.reason}; cancelled {cancelled} queued dispatch run(s)")
        return SkipReason(verdict.reason)
    release_hold(instance, engine, cap=settings.max_concurrent_dispatches)

    cursor = int(context.cursor) if use_cursor and context.cursor else 0
    now = utcnow()
    done = Reconciled()
    notes: list[str] = []
    if owns_reconcile:
        with session_scope(engine) as session:
            step = rollout_step(session, now=now)
            allowed = requeue_config_refused(session, settings_fingerprint(settings))
        if step.requeued:
            notes.append(f"extractor manifest rollout: {step.requeued} card(s) back in the Stage C backlog")
        if allowed:
            notes.append(f"settings changed: {allowed} card(s) waiting on configuration back in the Stage C backlog")
        done = reconcile(instance, engine, settings, now=now)
    per_tick = max_batches_per_tick(settings)
    active = active_dispatch_runs(instance)
    governed = standing_limit(engine, settings.max_concurrent_dispatches)
    if done.due or has_unclaimed(engine, predicate, now=now) or has_batch_in_flight(engine):
        own_running = sum(1 for run in active if run.status in RUNNING)
        steering = steer_by_contention(engine, settings, own_running=own_running, now=now)
        if steering.trip_id is not None:  # what reconciling settled still goes in the ledger
            return SensorResult(
                skip_reason=f"{steering.governed.reason}: opened trip {steering.trip_id}",
                asset_events=done.observations,
                cursor=context.cursor if use_cursor else None,
            )
        if steering.changed:
            notes.append(steering.governed.reason)
            done.observations.append(governor_observation(steering))
        governed = steering.governed.limit
    # Marked requested only now that this tick emits them, and no more than it emits: a batch marked
    # and left out waits REQUEST_GRACE before it is requested again.
    requeue = request_due(engine, settings, done.due, now=now, limit=per_tick)
    # The pool follows the governed concurrency, so the backfill daemon starts a sweep's runs under it too.
    pool_cap = apply_pool_setting(instance, engine, governed)
    cap = min(pool_cap, governed) if pool_cap is not None else governed
    # Runs queued beyond the pool's limit wait for a slot only while the pool is the limit: under a
    # governed limit below an operator's own pool limit, the sensor alone keeps the count.
    queue_ahead = pool_cap is not None and cap == pool_cap
    in_flight = len(active)
    # Watch only while a card that lands could start at once: with every slot running, it would wait
    # for a slot anyway, and the next tick batches it in time. The watch counts from the tick's start,
    # so a tick never outlasts the daemon's pass because reconciling was slow.
    slot_free = in_flight + len(requeue) < cap
    watch_until = started + (settings.arrival_wait_s if wait_for_arrivals and slot_free else 0.0)
    watched = False
    while True:
        with session_scope(engine) as session:
            plan = plan_for_tick(
                settings, in_flight_runs=in_flight + len(requeue), cap=cap, queue_ahead=queue_ahead, session=session,
                predicate=predicate, now=now,
            )
            plan = replace(plan, max_batches=min(plan.max_batches, per_tick - len(requeue)))
            fresh = create_batches(
                session,
                predicate,
                plan,
                trigger_reason=trigger_reason,
                now=now,
                claim_ttl_s=settings.claim_ttl_s,
                seeds_after=cursor if use_cursor else None,
            )
        # Idle with free slots: watch for the next card (or a batch to request) until the watch ends,
        # then batch it (or request it) in this tick. A watch whose card could not be claimed (another
        # selector won it, or on PostgreSQL another transaction holds its row and SKIP LOCKED passes it
        # by) ends there: probing again would find the same row every POLL_S until the watch ran out.
        if fresh.batches or requeue or plan.max_batches == 0 or watched or time.monotonic() >= watch_until:
            break
        if not wait_for_work(engine, predicate, until=watch_until):
            break
        watched = True
        now = utcnow()
        with session_scope(engine) as session:
            verdict = check_gate(session, settings)
        if not verdict.allowed:  # a trip opened or streaming went off while watching: the next tick holds
            if notes or done.notes:  # what this tick rolled out or settled before the watch is still said
                context.log.info("; ".join(notes + done.notes))
            return SensorResult(skip_reason=verdict.reason, asset_events=done.observations,
                                cursor=context.cursor if use_cursor else None)
        if owns_reconcile:  # a tail split off (or a retry recorded) while the tick watched is requested now
            again = reconcile(instance, engine, settings, now=now)
            done.observations += again.observations
            done.notes += again.notes
            requeue += request_due(engine, settings, again.due, now=now, limit=per_tick - len(requeue))
        # Runs started or ended while the tick watched: plan the card with the runs and slots of now.
        active = active_dispatch_runs(instance)
        in_flight = len(active)
        pool_cap = pool_limit(instance)
        cap = min(pool_cap, governed) if pool_cap is not None else governed
        queue_ahead = pool_cap is not None and cap == pool_cap
    new_cursor = str(max(cursor, fresh.highest_seed_id or 0)) if use_cursor else None
    batches = requeue + fresh.batches
    notes += done.notes
    if not batches:
        if plan.max_batches == 0 and not requeue:
            reason = f"{in_flight} dispatch run(s) queued or going, the most for a limit of {cap}" + (
                " (one queued behind each running)" if queue_ahead else ""
            )
        else:
            reason = f"no unclaimed cards waiting for {trigger_reason}" + (
                f" (newest seen id {cursor})" if use_cursor else ""
            )
        if notes:
            context.log.info("; ".join(notes))
        return SensorResult(skip_reason=reason, asset_events=done.observations, cursor=new_cursor)
    if notes:
        context.log.info("; ".join(notes))
    return SensorResult(
        run_requests=[run_request(settings, b) for b in batches],
        dynamic_partitions_requests=[micro_batches.build_add_request([b.batch_key for b in batches])],
        asset_events=done.observations,
        cursor=new_cursor,
    )
