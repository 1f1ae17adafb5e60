"""Reading the ledger back: each micro-batch's materializations and failure entries, from the event log."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterator

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, EventLogRecord, EventRecordsResult

STAGE_C = AssetKey("stage_c_evidence")
STAGE_D = AssetKey("stage_d_verdicts")
# Records per event-log query (Dagster refuses more than 10,000 in one fetch).
PAGE_SIZE = 1000


@dataclass
class LedgerEntry:
    batch_key: str
    run_id: str
    at: float
    status: str
    fields: dict[str, Any] = field(default_factory=dict)


def _metadata(event: Any) -> dict[str, Any]:
    return {k: v.value for k, v in event.metadata.items()}


def _records(
    fetch: Callable[..., EventRecordsResult], records_filter: AssetRecordsFilter, page_size: int
) -> Iterator[EventLogRecord]:
    """Every record the filter matches, oldest first, a page at a time."""
    cursor = None
    while True:
        page = fetch(records_filter, limit=page_size, cursor=cursor, ascending=True)
        yield from page.records
        if not page.has_more:
            return
        cursor = page.cursor


def ledger_entries(
    instance: DagsterInstance, *, since: datetime | None = None, page_size: int = PAGE_SIZE
) -> list[LedgerEntry]:
    """One entry per run of a micro-batch, oldest first: both stages' rows merged, or the failure entry.

    Reads every record since ``since`` (the whole event log without it), so each run's entry is
    built from all its records, never from whichever few fell inside a fixed count.
    """
    after = since.timestamp() if since else None
    entries: dict[str, LedgerEntry] = {}
    for key in (STAGE_C, STAGE_D):
        window = AssetRecordsFilter(asset_key=key, after_timestamp=after)
        for record in _records(instance.fetch_materializations, window, page_size):
            mat = record.asset_materialization
            if mat is None:
                continue
            entry = entries.setdefault(
                record.run_id, LedgerEntry(mat.partition or "", record.run_id, record.timestamp, "stage_c_only")
            )
            entry.fields.update(_metadata(mat))
            entry.at = max(entry.at, record.timestamp)
            if key == STAGE_D:
                # A batch a trip stopped early finished only some of its cards (cards_done of card_count);
                # a run that lost its batch to a retry finished none of them as far as the ledger goes.
                if entry.fields.get("batch_lost"):
                    entry.status = "lost"
                else:
                    entry.status = "stopped" if entry.fields.get("stopped_early") else "completed"
    failures = AssetRecordsFilter(asset_key=STAGE_C, after_timestamp=after)
    for record in _records(instance.fetch_observations, failures, page_size):
        obs = record.asset_observation
        if obs is None or "failure_reason" not in obs.metadata:
            continue
        meta = _metadata(obs)
        run_id = str(meta.get("run_id", record.run_id))
        entry = entries.setdefault(run_id, LedgerEntry(obs.partition or "", run_id, record.timestamp, "failed"))
        # A sweep's run a trip refused wrote a 0-card ``stopped`` row, and its refusal entry says why.
        if entry.status != "stopped":
            entry.status = "failed"
        entry.fields.update(meta)
    return sorted(entries.values(), key=lambda e: e.at)


def cards_per_hour(entries: list[LedgerEntry]) -> float | None:
    """Cards through completed (or stopped) batches per hour, over the span from the first batch's start to
    the last's end; a stopped batch counts the cards it finished."""
    done = [e for e in entries if e.status in ("completed", "stopped")]
    if not done:
        return None
    cards = sum(int(e.fields.get("cards_done" if e.status == "stopped" else "card_count", 0)) for e in done)
    start = min(e.at - float(e.fields.get("elapsed_s", 0.0)) for e in done)
    span = max(e.at for e in done) - start
    return cards * 3600.0 / span if span > 0 else None
