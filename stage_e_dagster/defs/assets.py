"""The two assets of a micro-batch. Each reads its context, calls ``dispatch``, and returns the ledger row."""

import time
from typing import Any, Iterator

import sqlalchemy as sa
from dagster import AssetCheckResult, AssetExecutionContext, MaterializeResult, asset

from ..catalog.engine import session_scope
from ..dispatch.batch_rows import CODE_VERSION, refused_row, stage_c_row, stage_d_row
from ..dispatch.batches import get_batch
from ..dispatch.conveyor import (
    REFUSED_GATE,
    REFUSED_TAKEN,
    BatchInfo,
    DispatchRefused,
    finish_batch,
    lost_batch,
    run_batch_stage_c,
    run_batch_stage_d,
    start_batch,
)
from ..envelope.bars import Ceilings
from ..envelope.signals import peak_rss_mb
from ..envelope.trips import trip_opened_by_run
from .checks import stage_c_batch_check, stage_c_batch_clean_spec
from .dagster_internals import add_run_tags
from .partitions import micro_batches
from .resources import StageEResource
from .tags import BACKFILL_TAG, DISPATCH_POOL, REFUSED_REASON_TAG, REFUSED_TAG, REFUSED_TRIP_TAG


def _run_started_at(context: AssetExecutionContext) -> float:
    record = context.instance.get_run_record_by_id(context.run.run_id)
    started = record.start_time if record is not None else None
    return started if started is not None else time.time()


def _refused_row(context: AssetExecutionContext, engine: sa.Engine, stage: str, trip_id: str) -> dict[str, Any]:
    with session_scope(engine) as session:  # read only: a refusing run changes nothing
        stored = get_batch(session, context.partition_key)
        batch = BatchInfo(stored.batch_key, list(stored.card_ids), stored.trigger_reason, stored.attempt)
    return refused_row(batch, stage=stage, trip_id=trip_id, elapsed_s=time.time() - _run_started_at(context))


@asset(
    partitions_def=micro_batches,
    group_name="stage_e",
    pool=DISPATCH_POOL,
    code_version=CODE_VERSION,
    check_specs=[stage_c_batch_clean_spec],
    output_required=False,
    description="Stage C over one micro-batch: fetch each image once and persist its evidence.",
)
def stage_c_evidence(
    context: AssetExecutionContext, stage_e: StageEResource
) -> Iterator[MaterializeResult | AssetCheckResult]:
    """A run the in-run guard refuses says why in one warning line and materializes nothing.

    A refusal is the envelope doing its job, not an error: raising ``Failure`` would show a red run
    with a stack trace and a failed partition. Yielding no output instead ends the step without a
    materialization, so Dagster skips ``stage_d_verdicts`` and the run succeeds having done nothing.
    The refusal tags are what the run-end handling (``defs.run_ends``) reads to put the batch back.
    The batch check still answers (Dagster requires it): nothing was fetched, so nothing was lost.

    A sweep's run a trip refuses (dequeued before the hold took the pool to 0) materializes both assets
    instead, with a row that says the trip stopped the batch at 0 cards: Dagster's asset backfill counts a
    partition no run of the backfill materialized as failed, and would end a sweep in which nothing failed
    COMPLETED_FAILED. Streaming off (no trip) still materializes nothing.
    """
    settings = stage_e.settings()
    engine = stage_e.engine()
    try:
        batch = start_batch(engine, settings, context.partition_key, run_id=context.run.run_id)
    except DispatchRefused as refused:
        sweep_stopped = refused.kind == REFUSED_GATE and bool(refused.trip_id) and BACKFILL_TAG in context.run.tags
        tags = {REFUSED_TAG: refused.kind, REFUSED_REASON_TAG: refused.reason[:500]}
        if sweep_stopped:
            tags[REFUSED_TRIP_TAG] = str(refused.trip_id)
        add_run_tags(context.instance, context.run.run_id, tags)
        context.log.warning(f"dispatch refused, no work done: {refused.reason}")
        check = stage_c_batch_check({})._replace(description=f"refused before any card, nothing lost: {refused.reason}")
        if sweep_stopped:
            yield MaterializeResult(metadata=_refused_row(context, engine, "c", str(refused.trip_id)),
                                    check_results=[check])
        else:
            yield check
        return
    fetcher = stage_e.image_fetcher(settings)
    try:
        result = run_batch_stage_c(engine, batch, run_id=context.run.run_id, fetcher=fetcher, logger=context.log,
                                   ocr_pass=settings.ocr_pass, split_for=(settings, DISPATCH_POOL),
                                   ceilings=Ceilings.from_settings(settings))
    finally:
        fetcher.close()
    if result.lockout_trip_id:
        context.log.warning(f"image host lockout: opened trip {result.lockout_trip_id}; Stage C stopped")
    row = stage_c_row(
        result.batch,  # without the cards split off to a batch of their own: that batch's row counts them
        result.report,
        peak_rss_mb=peak_rss_mb(),
        elapsed_s=time.time() - _run_started_at(context),
        lockout_trip_id=result.lockout_trip_id,
        stopped_by_trip=result.stopped_by_trip,
    )
    yield MaterializeResult(metadata=row, check_results=[stage_c_batch_check(row)])


@asset(
    partitions_def=micro_batches,
    group_name="stage_e",
    pool=DISPATCH_POOL,
    code_version=CODE_VERSION,
    deps=[stage_c_evidence],
    output_required=False,
    description="Stage D over one micro-batch: machine votes, then consensus for every touched card.",
)
def stage_d_verdicts(context: AssetExecutionContext, stage_e: StageEResource) -> Iterator[MaterializeResult]:
    """Only the run that holds the batch works on it: a run whose batch was failed and retried while
    Stage C ran, or a re-execution of this step from the UI, says why and materializes nothing. After a
    sweep's run a trip refused, it writes the matching 0-card row (see ``stage_c_evidence``)."""
    settings = stage_e.settings()
    engine = stage_e.engine()
    run = context.instance.get_run_by_id(context.run.run_id)
    refused_trip = run.tags.get(REFUSED_TRIP_TAG) if run is not None else None
    if refused_trip:
        yield MaterializeResult(metadata=_refused_row(context, engine, "d", refused_trip))
        return
    lost = lost_batch(engine, context.partition_key, run_id=context.run.run_id)
    if lost is not None:
        add_run_tags(context.instance, context.run.run_id, {REFUSED_TAG: REFUSED_TAKEN, REFUSED_REASON_TAG: lost[:500]})
        context.log.warning(f"stage D refused, no work done: {lost}")
        return
    with session_scope(engine) as session:
        stored = get_batch(session, context.partition_key)
        batch = BatchInfo(stored.batch_key, list(stored.card_ids), stored.trigger_reason, stored.attempt)
        lockout = trip_opened_by_run(session, context.run.run_id, bar="fetch_lockout")
        lockout_trip_id = lockout.trip_id if lockout else None
        cards_done, stopped_by_trip = stored.cards_done, stored.stopped_by_trip
    stage_d = run_batch_stage_d(engine, batch, run_id=context.run.run_id, logger=context.log)
    finished = finish_batch(engine, settings, batch, run_id=context.run.run_id)
    if finished.envelope_trip_id:
        context.log.warning(f"run peak RSS {finished.peak_rss_mb:.0f} MB crossed its bar: "
                            f"opened trip {finished.envelope_trip_id}")
    if not finished.succeeded:
        context.log.warning(f"stage D stopped, batch lost: {stage_d.lost or 'no longer held by this run'}")
    row = stage_d_row(
        batch,
        stage_d.report,
        peak_rss_mb=finished.peak_rss_mb,
        elapsed_s=time.time() - _run_started_at(context),
        lockout_trip_id=lockout_trip_id,
        envelope_trip_id=finished.envelope_trip_id,
        cards_done=cards_done,
        stopped_by_trip=stopped_by_trip,
        batch_lost=not finished.succeeded,
    )
    yield MaterializeResult(metadata=row)
