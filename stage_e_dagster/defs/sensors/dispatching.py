"""The tick both dispatch sensors share: gate, hold or release, then new batches for the free slots."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Sequence

import sqlalchemy as sa
from dagster import RunRequest, RunsFilter, SensorEvaluationContext, SensorResult, SkipReason
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus
from sqlalchemy.orm import Session

from ...catalog.base import utcnow
from ...catalog.engine import session_scope
from ...catalog.models import MicroBatch
from ...dispatch.batches import IN_FLIGHT, create_batches, fail_and_retry
from ...dispatch.claims import extend_claims
from ...dispatch.guard import check_gate
from ...dispatch.sizing import plan_for_tick
from ...dispatch.sweep import SWEEP_TRIGGER
from ...settings import Settings
from ..hold import ACTIVE_STATUSES, hold_dispatch, in_flight_dispatch_runs, release_hold
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


def _reconcile(
    context: SensorEvaluationContext, session: Session, settings: Settings, batches: Sequence[MicroBatch]
) -> list[MicroBatch]:
    """Renew, expire or relaunch the batches in flight; returns the pending ones that need a run request.

    A batch whose run is queued or going keeps its claims (renewed each tick), as does a sweep's
    first attempt while its backfill is still submitting runs. A batch with no run past its
    claim TTL plus the run budget was lost (its worker and code server died, or its tick failed
    for good): it fails and retries, so a killed run's cards always come back.
    """
    if not batches:
        return []
    instance = context.instance
    keys = [b.batch_key for b in batches]
    runs = instance.get_runs(RunsFilter(tags={PARTITION_TAG: keys}))
    launched = {r.tags.get(PARTITION_TAG) for r in runs}
    active = {r.tags.get(PARTITION_TAG) for r in runs if r.status in ACTIVE_STATUSES}
    backfilling = bool(instance.get_backfills(filters=BulkActionsFilter(statuses=[BulkActionStatus.REQUESTED])))
    now = utcnow()
    deadline = timedelta(seconds=settings.claim_ttl_s + settings.run_max_runtime_s)
    requeue = []
    for batch in batches:
        owned_by_backfill = batch.trigger_reason == SWEEP_TRIGGER and batch.attempt == 1
        if batch.batch_key in active or (owned_by_backfill and backfilling):
            extend_claims(session, batch.batch_key, expires_at=now + timedelta(seconds=settings.claim_ttl_s))
        elif batch.created_at + deadline < now:
            retry = fail_and_retry(
                session,
                batch,
                reason="lease expired: no run finished the batch",
                now=now,
                max_attempts=settings.max_batch_attempts,
                claim_ttl_s=settings.claim_ttl_s,
            )
            if retry is not None:
                requeue.append(retry)
        elif batch.status == "pending" and batch.batch_key not in launched and not owned_by_backfill:
            requeue.append(batch)  # a retry, or a batch whose tick failed after recording it
    return requeue


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
        requeue = _reconcile(context, session, settings, open_batches)[: plan.max_batches]
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
