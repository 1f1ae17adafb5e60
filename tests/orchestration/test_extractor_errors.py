"""An extractor that raises is a counted, logged outcome, and a sustained share of them trips.

Real runs of ``stage_e_dispatch`` on a real instance and catalogue (in process); the extractor is
broken by replacing it in Stage C's manifest table for the test, nothing in the product.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from dagster import AssetCheckKey, AssetKey, DagsterEventType

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, EnvelopeTrip, ImageEvidence
from stage_e_dagster.catalog.evidence_facts import MANIFEST_VERSIONS
from stage_e_dagster.envelope.trips import acknowledge_trip
from stage_e_dagster.stage_c import extractors

from .conftest import Pipeline

BROKEN = "art hash broke"


@pytest.fixture(autouse=True)
def streaming_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", "true")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "10")


def _stage_c_row(pipeline: Pipeline, run_id: str) -> dict[str, object]:
    records = pipeline.instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    [mat] = [r.event_log_entry.asset_materialization for r in records
             if r.event_log_entry.asset_materialization.asset_key == AssetKey("stage_c_evidence")]
    return {k: v.value for k, v in mat.metadata.items()}


def _errored(pipeline: Pipeline) -> list[int]:
    with session_scope(pipeline.engine) as session:
        rows = session.execute(sa.select(ImageEvidence.card_id, ImageEvidence.skip_reasons)).all()
    return sorted(card_id for card_id, skips in rows if "extractor-error" in (skips or {}).values())


def test_an_extractor_that_raises_is_counted_logged_and_trips_and_the_ack_after_the_fix_reads_its_cards_again(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(ctx: object) -> None:
        raise RuntimeError(BROKEN)

    with monkeypatch.context() as patched:
        patched.setitem(extractors.IMAGE_EXTRACTORS, "art_phash", broken)
        [request] = pipeline.tick("card_created_sensor").run_requests
        outcome = pipeline.run(request.partition_key, tags=dict(request.tags))
    assert outcome.success
    row = _stage_c_row(pipeline, outcome.run_id)
    errored = _errored(pipeline)
    # 0.05 x 100 cards: the sixth card read with an error trips, and Stage C stops at the next card.
    assert row["stage_c_extractor_errors"] == len(errored) == 6, row
    check = pipeline.instance.get_latest_asset_check_evaluation_record(
        AssetCheckKey(AssetKey("stage_c_evidence"), "stage_c_batch_clean")
    ).event.dagster_event.event_specific_data
    assert not check.passed and check.metadata["stage_c_extractor_errors"].value == 6
    assert "6 card(s) read with an extractor that raised" in check.description
    messages = [e.user_message for e in pipeline.instance.all_logs(outcome.run_id) if e.dagster_event is None]
    tracebacks = [m for m in messages if "extractor-error" in m and "Traceback (most recent call last)" in m]
    assert len(tracebacks) == 6 and all(f"RuntimeError: {BROKEN}" in m for m in tracebacks)
    with session_scope(pipeline.engine) as session:
        [trip] = session.execute(sa.select(EnvelopeTrip)).scalars().all()
        assert trip.bar == "extractor_errors" and trip.acknowledged_at is None
        assert trip.detail["cause"] == f"art_phash: RuntimeError: {BROKEN}"
        assert trip.detail["observed"] == 6 and trip.detail["ceiling"] == 5
        trip_id = trip.trip_id
    assert any(trip_id in m and "art_phash" in m for m in messages)

    # The fix is in (the monkeypatch is gone); a person acknowledges, and the errored cards come back.
    with session_scope(pipeline.engine) as session:
        acked = acknowledge_trip(session, trip_id, note="art hash fixed", by="tester")
        assert acked.detail["given_back"] == {"parked_cards": 0, "extractor_error_cards": 6}
    with session_scope(pipeline.engine) as session:
        pending = session.execute(sa.select(Card.id).where(Card.stage_c_pending.is_(True))).scalars().all()
        assert set(errored) <= set(pending)
    runs = pipeline.drain()
    assert runs
    assert all(_stage_c_row(pipeline, run_id)["stage_c_extractor_errors"] == 0 for run_id in runs)
    assert _errored(pipeline) == []
    with session_scope(pipeline.engine) as session:
        rows = session.execute(sa.select(ImageEvidence).join(
            Card, sa.and_(Card.id == ImageEvidence.card_id, Card.content_hash == ImageEvidence.content_hash))).scalars()
        current = {ev.card_id for ev in rows if ev.terminal or ev.extractor_versions == dict(MANIFEST_VERSIONS)}
        cards = session.execute(sa.select(Card.id)).scalars().all()
        assert current == set(cards)
        assert session.execute(sa.select(sa.func.count()).select_from(EnvelopeTrip)).scalar_one() == 1
