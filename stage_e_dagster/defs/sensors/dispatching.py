"""The tick both dispatch sensors share: gate, hold or release, then new batches for the free slots."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Sequence

import sqlalchemy as sa
from dagster import RunRequest, RunsFilter, SensorEvaluationContext, SensorResult, SkipReason

from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...catalog.models import MicroBatch
from ...dispatch.batches import IN_FLIGHT, create_batches, fail_and_retry
from ...dispatch.guard import check_gate
from ...dispatch.sizing import plan_for_tick
from ...dispatch.sweep import SWEEP_TRIGGER
from ...settings import Settings
from ..hold import hold_dispatch, in_flight_dispatch_runs, release_hold
from ..partitions import micro_batches
from ..resources import StageEResource
from ..tags import PARTITION_TAG, dispatch_tags


def run_request(settings: Settings, batch: MicroBatch) -> RunRequest:
    # A run key is never reusable, even after a failed run: retries carry their own batch key.
    return RunRequest(
        run_key=batch.batch_key,
        partition_key=batch.batch_key,
        tags=dispatch_tags(settings, trigger_reason=batch.trigger_reason, attempt=batch.attempt),
    )


def _unlaunched(context: SensorEvaluationContext, batches: Sequence[MicroBatch]) -> list[MicroBatch]:
    """Pending batches with no run yet: retries, or batches whose tick failed after recording them."""
    return [
        b
        for b in batches
        # A sweep's first attempt belongs to its backfill; its retries are the sensors' to launch.
        if b.status == "pending"
        and not (b.trigger_reason == SWEEP_TRIGGER and b.attempt == 1)
        and context.instance.get_runs_count(RunsFilter(tags={PARTITION_TAG: b.batch_key})) == 0
    ]


def _expire_leases(session, settings: Settings, batches: Sequence[MicroBatch]) -> None:  # type: ignore[no-untyped-def]
    """Batches nobody finished within claim TTL plus the run budget fail and retry; a killed run's cards come back."""
    now = utcnow()
    deadline = timedelta(seconds=settings.claim_ttl_s + settings.run_max_runtime_s)
    for batch in batches:
        if batch.created_at + deadline < now:
            fail_and_retry(
                session,
                batch,
                reason="lease expired: no run finished the batch",
                now=now,
                max_attempts=settings.max_batch_attempts,
                claim_ttl_s=settings.claim_ttl_s,
            )


def dispatch_tick(
    context: SensorEvaluationContext,
    stage_e: StageEResource,
    *,
    predicate: sa.ColumnElement[bool],
    trigger_reason: str,
    use_cursor: bool,
) -> SensorResult | SkipReason:
    settings = stage_e.settings()
    engine = stage_e.engine()
    with session_scope(engine) as session:
        verdict = check_gate(session, settings)
    if not verdict.allowed:
        if verdict.trip_id:
            cancelled = hold_dispatch(context.instance, engine, reason=verdict.reason)
            if cancelled:
                return SkipReason(f"{verdict.reason}; cancelled {cancelled} queued dispatch run(s)")
        return SkipReason(verdict.reason)
    release_hold(context.instance, settings)

    cursor = int(context.cursor) if use_cursor and context.cursor else 0
    in_flight = in_flight_dispatch_runs(context.instance)
    plan = plan_for_tick(settings, in_flight_runs=in_flight)
    now = utcnow()
    with session_scope(engine) as session:
        open_batches = list(session.execute(sa.select(MicroBatch).where(MicroBatch.status.in_(IN_FLIGHT))).scalars())
        _expire_leases(session, settings, open_batches)
        requeue = _unlaunched(context, open_batches)[: plan.max_batches]
        fresh = create_batches(
            session,
            predicate,
            replace(plan, max_batches=plan.max_batches - len(requeue)),
            trigger_reason=trigger_reason,
            now=now,
            claim_ttl_s=settings.claim_ttl_s,
            seeds_after=cursor if use_cursor else None,
        )
        batches = requeue + fresh.batches
        requests = [run_request(settings, b) for b in batches]
        keys = [b.batch_key for b in batches]
    new_cursor = str(max(cursor, fresh.highest_seed_id or 0)) if use_cursor else None
    if not requests:
        if plan.max_batches == 0:
            reason = f"{in_flight} dispatch run(s) in flight, at the cap of {settings.max_concurrent_dispatches}"
        else:
            reason = f"no eligible cards for {trigger_reason}" + (f" (newest seen id {cursor})" if use_cursor else "")
        return SensorResult(skip_reason=reason, cursor=new_cursor)
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[micro_batches.build_add_request(keys)],
        cursor=new_cursor,
    )
