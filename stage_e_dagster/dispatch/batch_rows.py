"""The ledger row of a micro-batch: fixed snake_case keys, zeros included, numbers kept numeric.

The Dagster assets attach these dicts as materialization metadata, so the UI plots every
numeric field across batches; ``stage-e ledger`` reads them back from the event log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import __version__
from ..stage_c.manifest import MANIFEST_VERSIONS
from .conveyor import BatchInfo
from .conveyor import cards_done as stage_c_cards_done

if TYPE_CHECKING:
    from ..stage_c.run import StageCReport
    from ..stage_d.run import StageDReport

CODE_VERSION = f"stage-e-dagster {__version__}; manifest " + ",".join(f"{k}={v}" for k, v in MANIFEST_VERSIONS.items())

STAGE_C_FIELDS = (
    "stage_c_completed",
    "stage_c_skipped_current",
    "stage_c_fetch_failures",
    "stage_c_throttled",
    "stage_c_terminal",
    "stage_c_rejected",
    "stage_c_config_refused",
    "stage_c_extractor_errors",
)
STAGE_D_FIELDS = (
    "stage_d_join_key_votes",
    "stage_d_fallback_votes",
    "stage_d_slow_path_routed",
    "stage_d_abstentions",
    "consensus_changed",
    "batch_lost",
)


def _common(
    batch: BatchInfo, *, peak_rss_mb: float | None, elapsed_s: float, lockout_trip_id: str | None
) -> dict[str, Any]:
    return {
        "card_count": len(batch.card_ids),  # the cards the batch held
        "trigger_reason": batch.trigger_reason,
        "attempt": batch.attempt,
        "peak_rss_mb": round(peak_rss_mb or 0.0, 1),
        "elapsed_s": round(elapsed_s, 3),
        "lockout_trip_id": lockout_trip_id or "",
        "code_version": CODE_VERSION,
    }


def stopped_fields(*, cards_done: int, stopped_by_trip: str | None) -> dict[str, Any]:
    """Cards done of cards held, and whether a trip stopped the batch before every card (``stopped``)."""
    return {
        "cards_done": cards_done,
        "stopped_early": int(bool(stopped_by_trip)),
        "stopped_by_trip": stopped_by_trip or "",
    }


def stage_c_row(
    batch: BatchInfo,
    report: StageCReport,
    *,
    peak_rss_mb: float | None,
    elapsed_s: float,
    lockout_trip_id: str | None,
    stopped_by_trip: str | None = None,
) -> dict[str, Any]:
    row = _common(batch, peak_rss_mb=peak_rss_mb, elapsed_s=elapsed_s, lockout_trip_id=lockout_trip_id)
    row.update(stopped_fields(cards_done=stage_c_cards_done(report), stopped_by_trip=stopped_by_trip))
    row.update(
        stage_c_completed=report.completed,
        stage_c_skipped_current=report.skipped_current,
        stage_c_fetch_failures=report.fetch_failures,
        stage_c_throttled=report.throttled,
        stage_c_terminal=report.terminal,
        stage_c_rejected=report.rejected,
        stage_c_config_refused=report.config_refused,
        stage_c_extractor_errors=report.extractor_errors,
    )
    return row


def stage_d_row(
    batch: BatchInfo,
    report: StageDReport,
    *,
    peak_rss_mb: float | None,
    elapsed_s: float,
    lockout_trip_id: str | None,
    envelope_trip_id: str | None,
    cards_done: int | None = None,
    stopped_by_trip: str | None = None,
    batch_lost: bool = False,
) -> dict[str, Any]:
    """``batch_lost``: the run could not mark its batch succeeded (another evaluator took it), so the
    reader counts the row ``lost``, not ``completed``: the retry owns those cards."""
    row = _common(batch, peak_rss_mb=peak_rss_mb, elapsed_s=elapsed_s, lockout_trip_id=lockout_trip_id)
    row.update(stopped_fields(cards_done=cards_done or 0, stopped_by_trip=stopped_by_trip))
    row.update(
        stage_d_join_key_votes=report.join_key_votes,
        stage_d_fallback_votes=report.fallback_votes,
        stage_d_slow_path_routed=report.slow_path_routed,
        stage_d_abstentions=report.abstentions,
        consensus_changed=report.consensus_changed,
        envelope_trip_id=envelope_trip_id or "",
        batch_lost=int(batch_lost),
    )
    return row


def refused_row(batch: BatchInfo, *, stage: str, trip_id: str, elapsed_s: float) -> dict[str, Any]:
    """A stage's row for a backfill run a trip refused at the gate: the stage's fixed keys, all zero, and
    ``stopped_by_trip`` with 0 cards done (the batch's cards go back to the backlog at no cost)."""
    row = _common(batch, peak_rss_mb=None, elapsed_s=elapsed_s, lockout_trip_id=None)
    row.update(stopped_fields(cards_done=0, stopped_by_trip=trip_id))
    row.update(dict.fromkeys(STAGE_C_FIELDS if stage == "c" else STAGE_D_FIELDS, 0))
    if stage == "d":
        row["envelope_trip_id"] = ""
    return row


def failure_row(
    *,
    batch_key: str,
    card_count: int,
    trigger_reason: str,
    attempt: int,
    run_id: str,
    failure_reason: str,
    retry_batch_key: str | None,
) -> dict[str, Any]:
    return {
        "card_count": card_count,
        "trigger_reason": trigger_reason,
        "attempt": attempt,
        "run_id": run_id,
        "failure_reason": failure_reason[:2000],
        "retry_batch_key": retry_batch_key or "",
        "batch_key": batch_key,
    }
