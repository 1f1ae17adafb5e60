"""The two assets of a micro-batch. Each reads its context, calls ``dispatch``, and returns the ledger row."""

import time

from dagster import AssetExecutionContext, Failure, MaterializeResult, asset

from ..catalog.engine import session_scope
from ..dispatch.batches import get_batch
from ..dispatch.conveyor import (
    BatchInfo,
    DispatchRefused,
    finish_batch,
    run_batch_stage_c,
    run_batch_stage_d,
    start_batch,
)
from ..dispatch.ledger import CODE_VERSION, stage_c_row, stage_d_row
from ..envelope.signals import peak_rss_mb
from ..envelope.trips import trip_opened_by_run
from .partitions import micro_batches
from .resources import StageEResource
from .tags import DISPATCH_POOL, REFUSED_REASON_TAG, REFUSED_TAG


def _run_started_at(context: AssetExecutionContext) -> float:
    record = context.instance.get_run_record_by_id(context.run.run_id)
    started = record.start_time if record is not None else None
    return started if started is not None else time.time()


@asset(
    partitions_def=micro_batches,
    group_name="stage_e",
    pool=DISPATCH_POOL,
    code_version=CODE_VERSION,
    description="Stage C over one micro-batch: fetch each image once and persist its evidence.",
)
def stage_c_evidence(context: AssetExecutionContext, stage_e: StageEResource) -> MaterializeResult:
    settings = stage_e.settings()
    engine = stage_e.engine()
    try:
        batch = start_batch(engine, settings, context.partition_key, run_id=context.run.run_id)
    except DispatchRefused as refused:
        context.instance.add_run_tags(
            context.run.run_id, {REFUSED_TAG: refused.kind, REFUSED_REASON_TAG: refused.reason[:500]}
        )
        raise Failure(
            description=f"dispatch refused, no work done: {refused.reason}",
            metadata={"failure_reason": f"refused: {refused.reason}", "trip_id": refused.trip_id or ""},
            allow_retries=False,
        ) from None
    fetcher = stage_e.image_fetcher(settings)
    try:
        result = run_batch_stage_c(engine, batch, run_id=context.run.run_id, fetcher=fetcher)
    finally:
        fetcher.close()
    if result.lockout_trip_id:
        context.log.warning(f"image host lockout: opened trip {result.lockout_trip_id}; Stage C stopped")
    row = stage_c_row(
        batch,
        result.report,
        peak_rss_mb=peak_rss_mb(),
        elapsed_s=time.time() - _run_started_at(context),
        lockout_trip_id=result.lockout_trip_id,
    )
    return MaterializeResult(metadata=row)


@asset(
    partitions_def=micro_batches,
    group_name="stage_e",
    pool=DISPATCH_POOL,
    code_version=CODE_VERSION,
    deps=[stage_c_evidence],
    description="Stage D over one micro-batch: machine votes, then consensus for every touched card.",
)
def stage_d_verdicts(context: AssetExecutionContext, stage_e: StageEResource) -> MaterializeResult:
    settings = stage_e.settings()
    engine = stage_e.engine()
    with session_scope(engine) as session:
        stored = get_batch(session, context.partition_key)
        batch = BatchInfo(stored.batch_key, list(stored.card_ids), stored.trigger_reason, stored.attempt)
        lockout = trip_opened_by_run(session, context.run.run_id, bar="fetch_lockout")
        lockout_trip_id = lockout.trip_id if lockout else None
    report = run_batch_stage_d(engine, batch, run_id=context.run.run_id)
    peak, envelope_trip_id = finish_batch(engine, settings, batch, run_id=context.run.run_id)
    if envelope_trip_id:
        context.log.warning(f"run peak RSS {peak:.0f} MB crossed its bar: opened trip {envelope_trip_id}")
    row = stage_d_row(
        batch,
        report,
        peak_rss_mb=peak,
        elapsed_s=time.time() - _run_started_at(context),
        lockout_trip_id=lockout_trip_id,
        envelope_trip_id=envelope_trip_id,
    )
    return MaterializeResult(metadata=row)
