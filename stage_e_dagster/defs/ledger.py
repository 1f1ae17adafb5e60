"""Reading the ledger back: each micro-batch's materializations and failure entries, from the event log."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

STAGE_C = AssetKey("stage_c_evidence")
STAGE_D = AssetKey("stage_d_verdicts")


@dataclass
class LedgerEntry:
    batch_key: str
    run_id: str
    at: float
    status: str
    fields: dict[str, Any] = field(default_factory=dict)


def _metadata(event: Any) -> dict[str, Any]:
    return {k: v.value for k, v in event.metadata.items()}


def ledger_entries(instance: DagsterInstance, *, since: datetime | None = None, limit: int = 1000) -> list[LedgerEntry]:
    """One entry per run of a micro-batch, oldest first: both stages' rows merged, or the failure entry."""
    after = since.timestamp() if since else None
    entries: dict[str, LedgerEntry] = {}
    for key in (STAGE_C, STAGE_D):
        result = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, after_timestamp=after), limit=limit)
        for record in result.records:
            mat = record.asset_materialization
            if mat is None:
                continue
            entry = entries.setdefault(
                record.run_id, LedgerEntry(mat.partition or "", record.run_id, record.timestamp, "stage_c_only")
            )
            entry.fields.update(_metadata(mat))
            entry.at = max(entry.at, record.timestamp)
            if key == STAGE_D:
                entry.status = "completed"
    failures = instance.fetch_observations(AssetRecordsFilter(asset_key=STAGE_C, after_timestamp=after), limit=limit)
    for record in failures.records:
        obs = record.asset_observation
        if obs is None or "failure_reason" not in obs.metadata:
            continue
        meta = _metadata(obs)
        run_id = str(meta.get("run_id", record.run_id))
        entry = entries.setdefault(run_id, LedgerEntry(obs.partition or "", run_id, record.timestamp, "failed"))
        entry.status = "failed"
        entry.fields.update(meta)
    return sorted(entries.values(), key=lambda e: e.at)


def cards_per_hour(entries: list[LedgerEntry]) -> float | None:
    """Cards through completed batches per hour, over the span from the first batch's start to the last's end."""
    done = [e for e in entries if e.status == "completed"]
    if not done:
        return None
    cards = sum(int(e.fields.get("card_count", 0)) for e in done)
    start = min(e.at - float(e.fields.get("elapsed_s", 0.0)) for e in done)
    span = max(e.at for e in done) - start
    return cards * 3600.0 / span if span > 0 else None
