"""One micro-batch through the stages, as the Dagster assets call it: guard, Stage C, Stage D, finish.

Each step is a plain function over the catalogue so it can be tested without Dagster; the
assets only read their context, call these, and turn the answers into ledger metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from ..catalog.base import utcnow
from ..catalog.engine import session_scope
from ..envelope.bars import Ceilings, EnvelopeSignals
from ..envelope.signals import current_rss_mb, peak_rss_mb
from ..envelope.trips import check_envelope, open_trip
from ..settings import Settings
from ..stage_c.fetch import ImageFetcher
from ..stage_c.run import StageCReport, run_stage_c
from ..stage_d.run import StageDReport, run_stage_d
from .batches import IN_FLIGHT, dispatch_writer, get_batch, mark_running, mark_succeeded
from .guard import GateVerdict, check_gate


class DispatchRefused(Exception):
    """The in-run guard said no: the run does no work."""

    def __init__(self, reason: str, trip_id: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.trip_id = trip_id


@dataclass(frozen=True)
class BatchInfo:
    batch_key: str
    card_ids: list[int]
    trigger_reason: str
    attempt: int


@dataclass(frozen=True)
class StageCResult:
    report: StageCReport
    lockout_trip_id: str | None


def start_batch(engine: sa.Engine, settings: Settings, batch_key: str, *, run_id: str) -> BatchInfo:
    """The in-run guard, then mark the batch running and stretch its claims over the run's lifetime."""
    with session_scope(engine) as session:
        verdict = check_gate(session, settings, run_id=run_id, rss_mb=current_rss_mb())
        batch = get_batch(session, batch_key)
        if verdict.allowed and batch.status not in IN_FLIGHT:
            verdict = GateVerdict(False, f"batch {batch_key} is {batch.status}, not in flight")
        if not verdict.allowed:
            # Commit any trip the fresh sample opened; the batch stays in flight until the sensor
            # sees the refused run and retries or abandons it.
            batch.failure_reason = f"refused: {verdict.reason}"
            refusal = DispatchRefused(verdict.reason, verdict.trip_id)
        else:
            refusal = None
            mark_running(
                session,
                batch,
                run_id=run_id,
                claims_until=utcnow() + timedelta(seconds=settings.run_max_runtime_s + settings.claim_ttl_s),
            )
        info = BatchInfo(batch.batch_key, list(batch.card_ids), batch.trigger_reason, batch.attempt)
    if refusal is not None:
        raise refusal
    return info


def run_batch_stage_c(engine: sa.Engine, batch: BatchInfo, *, run_id: str, fetcher: ImageFetcher) -> StageCResult:
    """Stage C over the batch. A lockout stops Stage C and opens a trip at once; the caller goes on to Stage D."""
    report = run_stage_c(engine, batch.card_ids, writer=dispatch_writer(run_id), run_id=run_id, fetcher=fetcher)
    trip_id = None
    if report.lockout is not None:
        with session_scope(engine) as session:
            trip = open_trip(
                session,
                "fetch_lockout",
                {"observed": 1, "ceiling": 0, "lockout": _lockout_detail(report), "batch_key": batch.batch_key},
                run_id=run_id,
            )
            trip_id = trip.trip_id
    return StageCResult(report=report, lockout_trip_id=trip_id)


def _lockout_detail(report: StageCReport) -> dict[str, object]:
    lockout = report.lockout
    if lockout is None:
        return {}
    return {
        "host": lockout.host,
        "status_code": lockout.status_code,
        "card_id": lockout.card_id,
        "locator": lockout.locator,
    }


def run_batch_stage_d(engine: sa.Engine, batch: BatchInfo, *, run_id: str) -> StageDReport:
    """Stage D scoped to the batch: work already in hand drains even after a lockout."""
    return run_stage_d(engine, batch.card_ids, run_id=run_id)


def finish_batch(
    engine: sa.Engine, settings: Settings, batch: BatchInfo, *, run_id: str
) -> tuple[float | None, str | None]:
    """Mark the batch done, release its claims, and check the run's true RSS peak against its bar.

    Returns the peak and the id of a trip it opened, if any.
    """
    peak = peak_rss_mb()
    ceilings = Ceilings.from_settings(settings)
    with session_scope(engine) as session:
        mark_succeeded(session, get_batch(session, batch.batch_key), now=utcnow(), peak_rss_mb=peak)
        trip = check_envelope(session, EnvelopeSignals(rss_mb=peak), ceilings, run_id=run_id)
        return peak, trip.trip_id if trip else None
