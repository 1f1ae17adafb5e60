"""A dispatch run splits its batch's tail off for an idle slot, through the real assets and sensor.

The split's timing is shrunk (a check at every card, no start-up to win back) so ten cards are
enough; what it does to the batch rows, the claims, the ledger and the cards is what a real drain
gets (bench/streaming_vs_bulk.py shows a 1,000-card drain)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from dagster import AssetKey

from stage_e_dagster.catalog.models import Card, CardClaim, ImageEvidence, MicroBatch
from stage_e_dagster.dispatch import sizing, tail
from tests.orchestration.conftest import Pipeline


def ledger_card_counts(pipeline: Pipeline, asset: str) -> dict[str, int]:
    records = pipeline.instance.fetch_materializations(AssetKey(asset), limit=100).records
    return {r.partition_key: r.asset_materialization.metadata["card_count"].value for r in records}


def test_a_split_tail_runs_as_its_own_batch_and_every_card_is_done_once(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setattr(tail, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(tail, "MIN_CARDS_MEASURED", 1)
    monkeypatch.setattr(sizing, "SPLIT_START_S", 0.0)
    with pipeline.engine.connect() as conn:
        ids = list(conn.execute(sa.select(Card.id).order_by(Card.id)).scalars())
    assert len(ids) == 10

    first = pipeline.tick("card_created_sensor")  # ten cards are less than a run's start-up: one batch
    assert [r.partition_key for r in first.run_requests] and len(first.run_requests) == 1
    key = first.run_requests[0].partition_key
    outcome = pipeline.run(key, tags=dict(first.run_requests[0].tags))
    assert outcome.success

    with pipeline.engine.connect() as conn:
        rows = {r.batch_key: r for r in conn.execute(sa.select(MicroBatch))}
    assert rows[key].status == "succeeded"
    split_keys = [k for k in rows if k != key]
    assert len(split_keys) == 1, rows
    split = rows[split_keys[0]]
    assert split.status == "pending" and split.requested_at is None
    kept = list(rows[key].card_ids)
    assert kept == ids[: len(kept)] and list(split.card_ids) == ids[len(kept):]  # the tail, in order
    # The first run's ledger counts only the cards it kept; the tail waits, claimed by its own batch.
    assert ledger_card_counts(pipeline, "stage_c_evidence") == {key: len(kept)}
    with pipeline.engine.connect() as conn:
        claims = dict(conn.execute(sa.select(CardClaim.card_id, CardClaim.batch_key)).all())
        evidence_before = set(conn.execute(sa.select(ImageEvidence.card_id)).scalars())
    assert claims == {card_id: split.batch_key for card_id in split.card_ids}
    assert evidence_before <= set(kept)

    pipeline.drain()  # the next tick requests the split batch; its run does the tail
    with pipeline.engine.connect() as conn:
        statuses = dict(conn.execute(sa.select(MicroBatch.batch_key, MicroBatch.status)).all())
        per_card = dict(conn.execute(
            sa.select(ImageEvidence.card_id, sa.func.count()).group_by(ImageEvidence.card_id)).all())
    assert statuses == {key: "succeeded", split.batch_key: "succeeded"}
    assert sorted(per_card) == ids and set(per_card.values()) == {1}
    counts = ledger_card_counts(pipeline, "stage_c_evidence")
    assert counts == {key: len(kept), split.batch_key: len(split.card_ids)} and sum(counts.values()) == 10
    assert sum(ledger_card_counts(pipeline, "stage_d_verdicts").values()) == 10
