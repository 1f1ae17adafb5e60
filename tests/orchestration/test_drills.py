"""Black-box drills: the real daemon and the real code location, driven only from outside.

Slow by nature: every ``dagster`` CLI call and the daemon load the code location in a new process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, ImageEvidence, MicroBatch, StageDPass
from stage_e_dagster.defs.instance import EMBEDDED_INSTANCE_YAML, WORKSPACE_YAML, create_instance_storage

from .test_daemon import assert_no_duplicates, sqlite_stack_for

BIN = Path(sys.executable).parent
# Generous: the CI machine has 2 shared cores and a load of up to 10.
DRAIN_TIMEOUT_S = 420
CLI_TIMEOUT_S = 300


@pytest.mark.slow
def test_raw_sql_writes_behind_a_running_daemon_lose_no_card(corpus_template: Path, tmp_path: Path) -> None:
    """What the old code lost: evidence whose Stage D never ran, and an image changed by raw SQL."""
    # The first drain only sets the scene: two runs of five cards, not five of two.
    stack = sqlite_stack_for(corpus_template, tmp_path, batch_size=5)
    try:
        stack.start()
        stack.wait_until(stack.idle, timeout_s=DRAIN_TIMEOUT_S, what="the seeded backlog to drain")
        drained = stack.counts()
        assert drained["evidence_cards"] == drained["cards"] == drained["evidence"]

        with session_scope(stack.engine) as session:
            cards = {
                c.id: (c.image_locator, c.content_hash) for c in session.scalars(sa.select(Card).order_by(Card.id))
            }
            writers = dict(session.execute(sa.select(ImageEvidence.card_id, ImageEvidence.run_id)).all())
            batches_before = set(session.scalars(sa.select(MicroBatch.batch_key)))
        ids = sorted(cards)
        changed, source, stage_d_cards = ids[0], ids[1], ids[-3:]
        old_hash = cards[changed][1]
        assert old_hash and cards[source][1] and old_hash != cards[source][1]
        assert all(writers[c] for c in stage_d_cards)

        written_at = datetime.now(timezone.utc)
        with stack.engine.begin() as conn:
            for card_id in stage_d_cards:
                # What a cancelled or refused retry leaves: the run's evidence, and no Stage D pass after it.
                conn.execute(
                    sa.text("UPDATE cards SET stage_d_pending = true, evidence_writer = :writer WHERE id = :id"),
                    {"writer": f"dispatch:{writers[card_id]}", "id": card_id},
                )
            conn.execute(
                sa.text("UPDATE cards SET image_locator = :locator WHERE id = :id"),
                {"locator": cards[source][0], "id": changed},
            )
            # The database itself (migration 0004's trigger) puts the card back in the Stage C backlog.
            hash_now, pending_now = conn.execute(
                sa.text("SELECT content_hash, stage_c_pending FROM cards WHERE id = :id"), {"id": changed}
            ).one()
            assert hash_now is None and bool(pending_now)

        stack.wait_until(stack.idle, timeout_s=DRAIN_TIMEOUT_S, what="the raw-SQL writes to be processed")

        after = stack.counts()
        assert after["waiting"] == 0 and after["in_flight"] == 0
        assert after["evidence_cards"] == after["cards"] and after["evidence"] == after["cards"] + 1
        assert_no_duplicates(stack.engine)
        with session_scope(stack.engine) as session:
            card = session.get(Card, changed)
            assert card is not None and not card.stage_c_pending and not card.stage_d_pending
            assert card.content_hash == cards[source][1]  # the hash of the image now at its locator
            evidence = {
                e.content_hash: e
                for e in session.scalars(sa.select(ImageEvidence).where(ImageEvidence.card_id == changed))
            }
            assert set(evidence) == {old_hash, card.content_hash}
            assert not evidence[card.content_hash].terminal and evidence[card.content_hash].run_id
            passes_new_image = session.execute(
                sa.select(sa.func.count())
                .select_from(StageDPass)
                .where(StageDPass.card_id == changed, StageDPass.content_hash == card.content_hash)
            ).scalar_one()
            assert passes_new_image >= 1, "Stage D never ran on the changed card's new image"

            for card_id in stage_d_cards:
                assert not session.get(Card, card_id).stage_d_pending  # type: ignore[union-attr]
            new_batches = {
                b.batch_key: b
                for b in session.scalars(sa.select(MicroBatch).where(MicroBatch.batch_key.not_in(list(batches_before))))
            }
        assert all(b.status in ("succeeded", "failed", "abandoned") for b in new_batches.values())
        succeeded = [b for b in new_batches.values() if b.status == "succeeded"]
        covered_by = lambda reason: {c for b in succeeded if b.trigger_reason == reason for c in b.card_ids}  # noqa: E731
        assert set(stage_d_cards) <= covered_by("evidence-change"), new_batches
        assert changed in covered_by("card-created"), new_batches

        ledger = stack.stage_e("ledger", "--json", "--since", written_at.isoformat())
        assert ledger.returncode == 0, ledger.stderr
        completed = [b for b in json.loads(ledger.stdout)["batches"] if b["status"] == "completed"]
        by_trigger = {b["trigger_reason"] for b in completed}
        assert {"evidence-change", "card-created"} <= by_trigger, completed
        assert {b["batch_key"] for b in completed} <= set(new_batches)
    finally:
        stack.stop()
        stack.engine.dispose()


SENSORS = (
    "card_created_sensor",
    "evidence_changed_sensor",
    "envelope_trip_sensor",
    "retention_sensor",
    "backstop_sweep_sensor",
)


def _preview(sensor: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "dagster"), "sensor", "preview", "-w", str(WORKSPACE_YAML), sensor],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def _skip_message(sensor: str, preview: subprocess.CompletedProcess[str]) -> str:
    """The skip the preview printed; fails with the whole output when it printed something else."""
    prefix = f"Sensor returned false for {sensor}, skipping: "
    assert preview.returncode == 0, preview.stdout + preview.stderr
    lines = [line for line in preview.stdout.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"{sensor}: no skip reason printed\nstdout:\n{preview.stdout}\nstderr:\n{preview.stderr}"
    return lines[0][len(prefix) :]


@pytest.mark.slow
def test_default_off_with_the_real_code_location_and_no_database_url(tmp_path: Path) -> None:
    """Nothing but DAGSTER_HOME and a state folder: every sensor skips, none fails on a missing variable."""
    home, state, cwd = tmp_path / "dagster_home", tmp_path / "state", tmp_path / "cwd"
    for folder in (home, state, cwd):
        folder.mkdir()
    shutil.copyfile(EMBEDDED_INSTANCE_YAML, home / "dagster.yaml")
    # Create the instance's SQLite storage once, so the parallel previews below never race to create it.
    create_instance_storage(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))} | {
        "DAGSTER_HOME": str(home),
        "STAGE_E_STATE_DIR": str(state),
    }

    # Each preview loads the code location in its own process: run them side by side.
    with ThreadPoolExecutor(max_workers=len(SENSORS)) as pool:
        previews = dict(zip(SENSORS, pool.map(lambda s: _preview(s, env, cwd), SENSORS)))
    for sensor, preview in previews.items():
        assert "streaming is off" in _skip_message(sensor, preview), preview.stdout

    # Streaming on, still no STAGE_E_DATABASE_URL: the sensor reads the CLI's default catalogue.
    # (Contention bars out of reach: this checks which database is read, not the envelope.)
    on = env | {"STAGE_E_STREAMING_ENABLED": "true", "STAGE_E_HOST_LOAD_CEILING": "1000",
                "STAGE_E_CPU_PRESSURE_CEILING": "100"}
    upgraded = subprocess.run(
        [str(BIN / "stage-e"), "db", "upgrade"], env=on, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert (state / "catalog.sqlite").is_file()
    skip = _skip_message("card_created_sensor", _preview("card_created_sensor", on, cwd))
    assert skip.startswith("no unclaimed cards"), skip
