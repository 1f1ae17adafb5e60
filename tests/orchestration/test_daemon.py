"""The real thing: ``dagster-daemon`` with the project's workspace and instance config, in a child process.

Slow by nature (a daemon start, sensor ticks every few seconds, runs launched as processes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest
import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.instance.ref import InstanceRef

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import make_engine, session_scope
from stage_e_dagster.catalog.models import Card, CardClaim, ImageEvidence, MicroBatch, PrintingVote
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.defs.abandoned import BACKFILL_FINISHED
from stage_e_dagster.defs.dagster_internals import backfill_status, daemon_environment
from stage_e_dagster.defs.instance import (
    EMBEDDED_INSTANCE_YAML,
    PROJECT_ROOT,
    WORKSPACE_YAML,
    create_instance_storage,
)
from stage_e_dagster.defs.ledger import ledger_entries
from stage_e_dagster.defs.max_runtime import max_runtime_exceeded
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.defs.run_ends import runs_in_progress
from stage_e_dagster.dispatch.batches import PARKED_KEY
from stage_e_dagster.process_groups import start_group, stop_group
from tests.conftest import create_pg_database, drop_pg_database

from .conftest import ImageServer

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


class Stack:
    """A catalogue, a DAGSTER_HOME and the environment a daemon (and the CLI) runs with."""

    def __init__(
        self,
        tmp_path: Path,
        catalog_url: str,
        images: Path,
        *,
        instance_yaml: Path = EMBEDDED_INSTANCE_YAML,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = tmp_path / "dagster_home"
        self.home.mkdir()
        shutil.copyfile(instance_yaml, self.home / "dagster.yaml")
        self.catalog_url = catalog_url
        self.engine = make_engine(catalog_url)
        self.log = tmp_path / "daemon.log"
        self.env = daemon_environment(
            {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
            | {
                "DAGSTER_HOME": str(self.home),
                "STAGE_E_STATE_DIR": str(tmp_path / "state"),
                "STAGE_E_STREAMING_ENABLED": "true",
                "STAGE_E_DATABASE_URL": catalog_url,
                "STAGE_E_IMAGE_ROOTS": str(images),
                "STAGE_E_FETCH_ALLOWED_HOSTS": "127.0.0.1",
                "STAGE_E_HOST_LOAD_CEILING": "1000",
                "STAGE_E_CPU_PRESSURE_CEILING": "100",
                "STAGE_E_RSS_MB_CEILING": "100000",
                "STAGE_E_MICRO_BATCH_SIZE": "2",
                "STAGE_E_MAX_CONCURRENT_DISPATCHES": "2",
                # These drills check dispatch, not readings: the reader's cheap pass (tests/conftest.py).
                "STAGE_E_OCR_PASS": "cheap",
            }
            | (extra_env or {})
        )
        self.process: subprocess.Popen[bytes] | None = None
        self._runs: DagsterInstance | None = None
        # Before the daemon and any webserver start on this home, as every entry point does.
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("DAGSTER_PG")})
        create_instance_storage(self.home)

    def instance(self) -> DagsterInstance:
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("DAGSTER_PG")})
        return DagsterInstance.from_ref(InstanceRef.from_dir(str(self.home)))

    def stage_e(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "stage-e"), *args], env=self.env, capture_output=True, text=True, timeout=300)

    def start(self, workspace: Path = WORKSPACE_YAML) -> None:
        """The daemon on ``workspace``: the project's own by default, where the daemon starts its code server."""
        with open(self.log, "ab") as log:
            self.process = start_group(
                [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                env=self.env,
                cwd=PROJECT_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        """The daemon's whole group: its code server too, which outlived a daemon stopped alone."""
        if self.process is not None:
            stop_group(self.process)
        if self._runs is not None:
            self._runs.dispose()
            self._runs = None

    def counts(self) -> dict[str, int]:
        with session_scope(self.engine) as session:
            one = lambda q: session.execute(q).scalar_one()  # noqa: E731
            return {
                "cards": one(sa.select(sa.func.count()).select_from(Card)),
                "waiting": one(
                    sa.select(sa.func.count())
                    .select_from(Card)
                    .where(sa.or_(Card.stage_c_pending, Card.stage_d_pending))
                ),
                "in_flight": one(
                    sa.select(sa.func.count())
                    .select_from(MicroBatch)
                    .where(MicroBatch.status.in_(("pending", "running")))
                ),
                "evidence": one(sa.select(sa.func.count()).select_from(ImageEvidence)),
                "evidence_cards": one(sa.select(sa.func.count(sa.distinct(ImageEvidence.card_id)))),
            }

    def wait_until(
        self, done: Callable[[], bool], *, timeout_s: float, what: str, on_poll: Callable[[], None] = lambda: None
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            on_poll()
            if done():
                return
            assert self.process is None or self.process.poll() is None, (
                f"daemon exited with {self.process.returncode}; log:\n{self.log.read_text()[-3000:]}"
            )
            time.sleep(0.5)
        raise AssertionError(
            f"timed out waiting for {what}; counts {self.counts()}; log tail:\n{self.log.read_text()[-3000:]}"
        )

    def idle(self) -> bool:
        """Nothing waiting, no batch in flight, and no run still writing its records.

        A batch is marked succeeded inside Stage D, a moment before its run logs the materialization:
        the catalogue alone can look idle while the ledger is still one entry short.
        """
        c = self.counts()
        if c["waiting"] or c["in_flight"]:
            return False
        if self._runs is None:
            self._runs = self.instance()
        return runs_in_progress(self._runs) == 0


class ConcurrencyProbe:
    """Samples how many dispatch runs are in progress at once."""

    def __init__(self, instance: DagsterInstance) -> None:
        self.instance = instance
        self.peak = 0

    def __call__(self) -> None:
        started = self.instance.get_runs_count(
            RunsFilter(statuses=[DagsterRunStatus.STARTING, DagsterRunStatus.STARTED])
        )
        self.peak = max(self.peak, started)


def assert_no_duplicates(engine: sa.Engine) -> None:
    with session_scope(engine) as session:
        dup_evidence = session.execute(
            sa.select(ImageEvidence.card_id, ImageEvidence.content_hash)
            .group_by(ImageEvidence.card_id, ImageEvidence.content_hash)
            .having(sa.func.count() > 1)
        ).all()
        dup_votes = session.execute(
            sa.select(PrintingVote.card_id, PrintingVote.printing_id, PrintingVote.agent_id)
            .group_by(PrintingVote.card_id, PrintingVote.printing_id, PrintingVote.agent_id)
            .having(sa.func.count() > 1)
        ).all()
    assert dup_evidence == [] and dup_votes == []


def sqlite_stack_for(corpus_template: Path, tmp_path: Path, *, batch_size: int = 2, cap: int = 2) -> Stack:
    """A stack on a copy of the seeded SQLite catalogue."""
    shutil.copy(corpus_template / "catalog.sqlite", tmp_path / "catalog.sqlite")
    return Stack(
        tmp_path,
        f"sqlite:///{tmp_path / 'catalog.sqlite'}",
        corpus_template / "corpus",
        extra_env={"STAGE_E_MICRO_BATCH_SIZE": str(batch_size), "STAGE_E_MAX_CONCURRENT_DISPATCHES": str(cap)},
    )


@pytest.fixture
def sqlite_stack(corpus_template: Path, tmp_path: Path) -> Iterator[Stack]:
    stack = sqlite_stack_for(corpus_template, tmp_path)
    yield stack
    stack.stop()
    stack.engine.dispose()


def test_daemon_drains_the_backlog_within_the_concurrency_cap(sqlite_stack: Stack) -> None:
    stack = sqlite_stack
    cards = stack.counts()["cards"]
    stack.start()
    probe = ConcurrencyProbe(stack.instance())
    stack.wait_until(stack.idle, timeout_s=240, what="the backlog to drain", on_poll=probe)
    after = stack.counts()
    assert after["evidence_cards"] == cards and after["evidence"] == cards
    assert 1 <= probe.peak <= 2, probe.peak
    assert_no_duplicates(stack.engine)
    ledger = stack.stage_e("ledger", "--json")
    assert ledger.returncode == 0, ledger.stderr
    batches = json.loads(ledger.stdout)["batches"]
    assert sum(int(b["card_count"]) for b in batches if b["status"] == "completed") == cards


def _worker_pid(instance: DagsterInstance, run_id: str) -> int | None:
    for record in instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT).records:
        match = re.search(r"Started process for run \(pid: (\d+)\)", record.event_log_entry.message or "")
        if match:
            return int(match.group(1))
    return None


def serve_over_http(engine: sa.Engine, server: ImageServer) -> list[str]:
    """Point every card at the test image server; returns the image names."""
    names = []
    with engine.begin() as conn:
        for card_id, locator in conn.execute(sa.select(Card.id, Card.image_locator)).all():
            name = locator.split("/corpus/", 1)[1]
            names.append(name)
            conn.execute(sa.update(Card).where(Card.id == card_id).values(image_locator=f"{server.base}/{name}"))
    return names


def run_with_evidence(instance: DagsterInstance, engine: sa.Engine, victim: dict[str, str]) -> bool:
    """Whether a started run has written evidence and logged its worker's pid; fills ``victim`` if so."""
    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED])):
        with session_scope(engine) as session:
            written = session.execute(
                sa.select(sa.func.count()).select_from(ImageEvidence).where(ImageEvidence.run_id == run.run_id)
            ).scalar_one()
        pid = _worker_pid(instance, run.run_id)
        if written >= 1 and pid is not None:
            victim.update(run_id=run.run_id, pid=str(pid), key=run.tags["dagster/partition"])
            return True
    return False


def test_a_sigkilled_run_leaves_a_truthful_failure_and_its_cards_are_redispatched(
    corpus_template: Path, tmp_path: Path
) -> None:
    server = ImageServer(corpus_template / "corpus")
    server.delay_s = 0.6  # slow images so the kill lands mid-batch
    stack = sqlite_stack_for(corpus_template, tmp_path, batch_size=5, cap=1)
    try:
        serve_over_http(stack.engine, server)
        cards = stack.counts()["cards"]
        stack.start()
        instance = stack.instance()
        victim: dict[str, str] = {}
        stack.wait_until(lambda: run_with_evidence(instance, stack.engine, victim), timeout_s=180,
                         what="a run that has written evidence")
        psutil.Process(int(victim["pid"])).send_signal(signal.SIGKILL)
        stack.wait_until(stack.idle, timeout_s=300, what="the killed batch's cards to be re-dispatched")

        run = instance.get_run_by_id(victim["run_id"])
        assert run.status == DagsterRunStatus.FAILURE
        entries = ledger_entries(instance)
        failed = [e for e in entries if e.status == "failed"]
        assert [e.batch_key for e in failed] == [victim["key"]]
        assert failed[0].fields["failure_reason"] and failed[0].fields["retry_batch_key"] == victim["key"] + "-r2"
        with session_scope(stack.engine) as session:
            retry = session.get(MicroBatch, victim["key"] + "-r2")
            assert retry is not None and retry.status == "succeeded" and retry.attempt == 2
            assert session.get(MicroBatch, victim["key"]).status == "failed"
        after = stack.counts()
        assert after["evidence_cards"] == cards and after["evidence"] == cards
        assert_no_duplicates(stack.engine)
    finally:
        stack.stop()
        stack.engine.dispose()
        server.close()


def test_the_sweep_launches_one_backfill_its_runs_respect_the_pool_and_cancelling_two_loses_no_card(
    sqlite_stack: Stack, image_server: ImageServer
) -> None:
    """One backfill whose runs the pool caps. Issue 31 item 2: a person cancels one of its runs while
    queued and one while running, as the UI does (the run coordinator's ``cancel_run``). Each abandons
    its batch at no attempt and the sensors process its cards; Dagster counts a cancelled partition
    failed, so the backfill ends COMPLETED_FAILED (docs/operations.md says what an operator sees)."""
    stack = sqlite_stack
    serve_over_http(stack.engine, image_server)
    stack.env["STAGE_E_FETCH_TIMEOUT_S"] = "600"  # a fetch the server holds waits for the test, never times out
    cards = stack.counts()["cards"]
    launched = stack.stage_e("sweep")
    assert launched.returncode == 0, launched.stderr
    assert "launched backfill" in launched.stdout
    instance = stack.instance()
    [backfill] = instance.get_backfills()
    its_runs = lambda *statuses: instance.get_runs(  # noqa: E731
        RunsFilter(tags={"dagster/backfill": backfill.backfill_id}, statuses=list(statuses)))
    image_server.hold()
    stack.start()
    probe = ConcurrencyProbe(instance)
    victims: dict[str, str] = {}

    def two_running_one_queued() -> bool:
        """Both slots hold a run that took its batch and waits in a fetch, so no queued run can start
        (the pool's limit is at its cap) while the test cancels one."""
        started, queued = its_runs(DagsterRunStatus.STARTED), its_runs(DagsterRunStatus.QUEUED)
        with session_scope(stack.engine) as session:
            holding = [r for r in started
                       if session.get(MicroBatch, r.tags["dagster/partition"]).run_id == r.run_id]
        if len(holding) < 2 or not queued or len(image_server.requests) < 2:
            return False
        victims.update(running=holding[0].run_id, queued=queued[0].run_id)
        return True

    stack.wait_until(two_running_one_queued, timeout_s=240, what="two runs in their fetch and one queued",
                     on_poll=probe)
    assert instance.run_coordinator.cancel_run(victims["queued"])
    assert instance.run_coordinator.cancel_run(victims["running"])

    def interrupted() -> bool:
        """The worker took the interrupt: with every fetch held only the interrupt ends its first card,
        and the card loop logs its progress then; the run ends once the held fetch returns."""
        records = instance.get_records_for_run(victims["running"]).records
        kinds = [r.event_log_entry.dagster_event_type for r in records]
        if DagsterEventType.RUN_CANCELING not in kinds:
            return False
        after = records[kinds.index(DagsterEventType.RUN_CANCELING) + 1:]
        return any((r.event_log_entry.message or "").startswith("stage C: ") for r in after)

    stack.wait_until(interrupted, timeout_s=120, what="the running run to take the interrupt", on_poll=probe)
    image_server.release()
    stack.wait_until(lambda: instance.get_run_by_id(victims["running"]).status == DagsterRunStatus.CANCELED,
                     timeout_s=120, what="the running run to be cancelled", on_poll=probe)
    stack.wait_until(lambda: stack.idle() and backfill_status(instance, backfill.backfill_id) in BACKFILL_FINISHED,
                     timeout_s=360, what="every card processed and the backfill finished", on_poll=probe)
    assert 1 <= probe.peak <= 2, probe.peak
    runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))
    assert runs and all(r.tags.get("stage_e/dispatch") == "micro-batch" for r in runs)
    cancelled = {r.run_id: r.tags["dagster/partition"] for r in runs if r.status == DagsterRunStatus.CANCELED}
    assert set(cancelled) == {victims["queued"], victims["running"]}
    with session_scope(stack.engine) as session:
        for key in cancelled.values():
            batch = session.get(MicroBatch, key)
            assert (batch.status, batch.attempt, batch.failure_reason) == (
                "abandoned", 1, "run cancelled before it finished"), key
            assert session.get(MicroBatch, key + "-r2") is None
    after = stack.counts()
    assert after["evidence_cards"] == cards and after["evidence"] == cards
    assert_no_duplicates(stack.engine)
    ledger = {e.batch_key: e.status for e in ledger_entries(instance) if e.batch_key in cancelled.values()}
    print(f"\nbackfill {backfill_status(instance, backfill.backfill_id)}; cancelled batches in the ledger: {ledger}")
    assert backfill_status(instance, backfill.backfill_id) == "COMPLETED_FAILED"
    again = stack.stage_e("sweep")
    assert again.returncode == 0 and "backlog empty after a full lap" in again.stdout, again.stdout
    assert len(instance.get_backfills()) == 1


@pytest.mark.postgres
def test_postgres_catalogue_and_dagster_instance(tmp_path: Path, corpus_template: Path) -> None:
    catalog_url = create_pg_database("stage_e_daemon_catalog")
    dagster_url = create_pg_database("stage_e_daemon_dagster", migrate=False)
    try:
        engine = make_engine(catalog_url)
        seed_corpus(engine, tmp_path / "corpus", cards=6, seed=5)
        engine.dispose()
        stack = Stack(
            tmp_path,
            catalog_url,
            tmp_path / "corpus",
            instance_yaml=PROJECT_ROOT / "deploy" / "dagster.postgres.yaml",
            extra_env={"DAGSTER_PG_URL": dagster_url},
        )
        try:
            stack.start()
            instance = stack.instance()
            probe = ConcurrencyProbe(instance)
            stack.wait_until(stack.idle, timeout_s=300, what="the backlog to drain on PostgreSQL", on_poll=probe)
            assert stack.counts()["evidence_cards"] == 6
            assert 1 <= probe.peak <= 2
            assert_no_duplicates(stack.engine)
            assert len(ledger_entries(instance)) >= 3
        finally:
            stack.stop()
            stack.engine.dispose()
    finally:
        drop_pg_database(catalog_url)
        drop_pg_database(dagster_url)


def sensor_ticks(instance: DagsterInstance, name: str, limit: int = 5) -> list:
    """The sensor's newest ticks as the daemon recorded them (a tick ends once its requests are applied)."""
    for state in instance.all_instigator_state():
        if state.instigator_name == name:
            return list(instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=limit))
    return []


def sweep_under_way(stack: Stack) -> tuple[DagsterInstance, str, Callable[..., int]]:
    """Launch a sweep, start the daemon and wait for a finished sweep run with more queued behind it;
    returns the instance, the backfill's id and a count of dispatch runs by status."""
    assert stack.stage_e("sweep").returncode == 0
    with session_scope(stack.engine) as session:
        [backfill_id] = session.execute(sa.select(MicroBatch.backfill_id).distinct()).scalars().all()
    stack.start()
    instance = stack.instance()
    dispatch = {"stage_e/dispatch": "micro-batch"}

    def count(*statuses: DagsterRunStatus) -> int:
        return instance.get_runs_count(RunsFilter(tags=dispatch, statuses=list(statuses)))

    stack.wait_until(lambda: count(DagsterRunStatus.SUCCESS) >= 1 and count(DagsterRunStatus.QUEUED) >= 2,
                     timeout_s=180, what="a finished run with more queued behind it")
    return instance, backfill_id, count


def test_a_trip_holds_a_sweeps_queued_runs_every_tick_and_they_run_after_the_ack(
    corpus_template: Path, tmp_path: Path
) -> None:
    """A sweep's queued runs are held (pool at 0), not cancelled: a cancelled backfill run would fail
    its partition for good, and the backfill would read COMPLETED_FAILED with nothing failed."""
    # Ten cards in five two-card runs, one at a time: a run or two may start before the hold, and at
    # least two stay queued behind it (with one-card runs, the eight or so after the ack ran one by one).
    stack = sqlite_stack_for(corpus_template, tmp_path, batch_size=2, cap=1)
    try:
        cards = stack.counts()["cards"]
        instance, backfill_id, count = sweep_under_way(stack)  # one backfill: a queue of two-card runs
        opened = stack.stage_e("trips", "open", "--note", "maintenance window")
        assert opened.returncode == 0, opened.stderr
        trip_id = opened.stdout.split()[1]
        pool_slots = lambda: instance.event_log_storage.get_concurrency_info("stage_e_dispatch").slot_count  # noqa: E731
        held_since: list[float] = []

        def held_and_drained() -> bool:
            """The pool at 0 with nothing in flight, for 5 s on end: a run the queue took in the pass
            before the hold is still QUEUED for a moment, and it has started (and refused) by then."""
            if pool_slots() != 0 or count(DagsterRunStatus.STARTING, DagsterRunStatus.STARTED) != 0:
                held_since.clear()
                return False
            held_since[:] = held_since or [time.monotonic()]
            return time.monotonic() - held_since[0] >= 5

        # The hold applies at the next sensor tick; a run dequeued before it refuses.
        stack.wait_until(held_and_drained, timeout_s=120, what="the pool held and in-flight work drained")
        started_before = count(DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE)
        time.sleep(15)  # three sensor ticks: nothing new may start, nothing is cancelled
        assert count(DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.STARTED) == started_before
        assert count(DagsterRunStatus.QUEUED) >= 1 and count(DagsterRunStatus.CANCELED) == 0
        assert stack.counts()["waiting"] > 0
        assert pool_slots() == 0
        acked = stack.stage_e("trips", "ack", trip_id, "--note", "window closed")
        assert acked.returncode == 0, acked.stderr
        stack.wait_until(stack.idle, timeout_s=300, what="every held card to be processed after the ack")
        assert stack.counts()["evidence_cards"] == cards
        assert_no_duplicates(stack.engine)
        # What the Backfills page says: a run dequeued between the trip and the hold refused, and wrote
        # its partition as stopped by the trip at 0 cards, so no partition reads failed.
        stack.wait_until(
            lambda: (backfill_status(instance, backfill_id) or "").startswith("COMPLETED"),
            timeout_s=180,
            what="the backfill to complete",
        )
        its_runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
        refused = [r for r in its_runs if r.tags.get("stage_e/refused")]
        print(f"\nbackfill {backfill_id}: {backfill_status(instance, backfill_id)}; "
              f"its runs: {sorted(r.status.value for r in its_runs)}; refused: {len(refused)}")
        assert backfill_status(instance, backfill_id) == "COMPLETED_SUCCESS"
    finally:
        stack.stop()
        stack.engine.dispose()


def test_a_run_the_live_run_monitor_stops_for_its_max_runtime_spends_an_attempt(
    corpus_template: Path, tmp_path: Path
) -> None:
    """Issue 31 item 5: the run monitor cancels a run past its ``dagster/max_runtime``, then the launcher
    writes a newer generic cancel, the monitor a failure and the interrupted worker its own events.
    Read from that real sequence, the stop is a timeout that spends an attempt (here the only one, so
    the hanging card is parked), never a person's cancel that puts the card straight back."""
    server = ImageServer(corpus_template / "corpus")
    server.delay_s = 10  # the one card's image hangs past the run's max runtime
    yaml = tmp_path / "dagster.yaml"
    yaml.write_text(EMBEDDED_INSTANCE_YAML.read_text().replace("poll_interval_seconds: 5", "poll_interval_seconds: 1"))
    shutil.copy(corpus_template / "catalog.sqlite", tmp_path / "catalog.sqlite")
    stack = Stack(tmp_path, f"sqlite:///{tmp_path / 'catalog.sqlite'}", corpus_template / "corpus",
                  instance_yaml=yaml,
                  extra_env={"STAGE_E_MICRO_BATCH_SIZE": "1", "STAGE_E_MAX_CONCURRENT_DISPATCHES": "1",
                             "STAGE_E_RUN_MAX_RUNTIME_S": "4", "STAGE_E_FETCH_TIMEOUT_S": "60",
                             "STAGE_E_MAX_BATCH_ATTEMPTS": "1"})
    try:
        serve_over_http(stack.engine, server)
        with stack.engine.begin() as conn:  # one card waits; the rest are done
            first = conn.execute(sa.select(sa.func.min(Card.id))).scalar_one()
            conn.execute(sa.update(Card).where(Card.id != first).values(stage_c_pending=False, stage_d_pending=False))
        stack.start()
        instance = stack.instance()
        run: dict[str, str] = {}

        def worker_exited() -> bool:
            """The run's whole sequence is written: its worker logged its exit after the interrupt."""
            with session_scope(stack.engine) as session:
                run_id = session.execute(sa.select(MicroBatch.run_id).where(MicroBatch.run_id.is_not(None))).scalar()
            if run_id is None:
                return False
            run["id"] = run_id
            engine_events = instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT).records
            return any("Process for run exited" in (r.event_log_entry.message or "") for r in engine_events)

        stack.wait_until(worker_exited, timeout_s=180, what="the run past its max runtime to be stopped")
        records = instance.get_records_for_run(run["id"]).records
        sequence = [r.event_log_entry.dagster_event.event_type_value for r in records
                    if r.event_log_entry.dagster_event is not None]
        assert sequence.count("PIPELINE_CANCELING") >= 1, sequence
        assert max_runtime_exceeded(instance, run["id"]) is not None, (
            f"Dagster's sequence {sequence[-5:]} read as a person's cancel"
        )

        def settled() -> bool:
            with session_scope(stack.engine) as session:
                return session.execute(sa.select(MicroBatch).where(MicroBatch.status.in_(("failed", "abandoned")))
                                       ).first() is not None

        stack.wait_until(settled, timeout_s=60, what="the stopped run to be settled")
        with session_scope(stack.engine) as session:
            [batch] = session.execute(sa.select(MicroBatch)).scalars().all()
            status, reason = batch.status, batch.failure_reason
            parked = session.execute(sa.select(CardClaim.card_id).where(CardClaim.batch_key == PARKED_KEY)
                                     ).scalars().all()
        assert (status, parked) == ("failed", [first]), f"settled {status} ({reason}), parked {parked}"
        assert (reason or "").startswith("run exceeded its max runtime"), reason
    finally:
        stack.stop()
        stack.engine.dispose()
        server.close()


def test_a_sweep_outlives_a_trip_longer_than_its_claim_lease_and_the_retention_grace(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Issue 31 item 2: a trip during a sweep of 100 cards that outlasts the claim lease and the grace
    after which retention deletes an abandoned batch's partition (both shortened here; in the drill a
    10-minute trip). Retention must not delete a partition the unfinished backfill still targets (the
    backfill daemon would fail the backfill and cancel its queued runs): after the ack the backfill
    reads COMPLETED_SUCCESS, every card has evidence, and no run was cancelled."""
    shutil.copy(sqlite_template, tmp_path / "catalog.sqlite")
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    engine = make_engine(url)
    seed_corpus(engine, tmp_path / "corpus", cards=100, seed=31)
    engine.dispose()
    # Ten batches of ten, two runs at a time: when the first run has finished most are still queued for
    # the trip to hold (batches of five made twenty runs, each a run worker's start for five cards).
    stack = Stack(tmp_path, url, tmp_path / "corpus",
                  extra_env={"STAGE_E_MICRO_BATCH_SIZE": "10", "STAGE_E_MAX_CONCURRENT_DISPATCHES": "2",
                             "STAGE_E_CLAIM_TTL_S": "10", "STAGE_E_ABANDONED_GRACE_S": "1"})
    try:
        cards = stack.counts()["cards"]
        assert cards >= 100
        instance, backfill_id, count = sweep_under_way(stack)
        opened = stack.stage_e("trips", "open", "--note", "a long trip during the sweep")
        assert opened.returncode == 0, opened.stderr
        trip_id = opened.stdout.split()[1]
        lease_gone = utcnow().replace(tzinfo=None) + timedelta(seconds=11)

        def a_retention_tick_past_the_lease_and_the_grace_finished() -> bool:
            """The trip has outlasted the claim lease, and a retention tick (every 60 s) begun after the
            grace of every batch abandoned so far has finished, so any deletion it asked for is applied."""
            with session_scope(stack.engine) as session:
                last_abandoned = session.execute(sa.select(sa.func.max(MicroBatch.finished_at))
                                                 .where(MicroBatch.status == "abandoned")).scalar()
            due = max(lease_gone, (last_abandoned.replace(tzinfo=None) if last_abandoned else lease_gone)
                      + timedelta(seconds=1))
            return any(tick.timestamp > due.replace(tzinfo=timezone.utc).timestamp() and tick.status.value != "STARTED"
                       for tick in sensor_ticks(instance, "retention_sensor"))

        stack.wait_until(a_retention_tick_past_the_lease_and_the_grace_finished, timeout_s=180,
                         what="the trip to outlast the claim lease and a retention tick after the grace")
        with session_scope(stack.engine) as session:
            sweep_keys = session.execute(sa.select(MicroBatch.batch_key)
                                         .where(MicroBatch.backfill_id == backfill_id)).scalars().all()
            abandoned = session.execute(sa.select(sa.func.count()).select_from(MicroBatch)
                                        .where(MicroBatch.status == "abandoned",
                                               MicroBatch.backfill_id == backfill_id)).scalar_one()
        status = backfill_status(instance, backfill_id)
        print(f"\nduring the trip: {abandoned} sweep batch(es) abandoned, backfill {status}")
        assert set(instance.get_existing_dynamic_partitions(micro_batches.name, sweep_keys)) == set(sweep_keys)
        acked = stack.stage_e("trips", "ack", trip_id, "--note", "trip over")
        assert acked.returncode == 0, acked.stderr
        stack.wait_until(
            lambda: stack.idle() and (backfill_status(instance, backfill_id) or "").startswith(("COMPLETED", "FAILED")),
            timeout_s=400, what="every card processed and the backfill finished after the ack",
        )
        assert backfill_status(instance, backfill_id) == "COMPLETED_SUCCESS"
        assert stack.counts()["evidence_cards"] == cards
        assert count(DagsterRunStatus.CANCELED) == 0, "a run was cancelled"
        assert_no_duplicates(stack.engine)
    finally:
        stack.stop()
        stack.engine.dispose()
