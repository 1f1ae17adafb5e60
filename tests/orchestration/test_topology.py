"""The production topology as separate services on PostgreSQL: a gRPC code server, ``dagster-daemon``
and ``dagster-webserver`` started by ``scripts/topology.py``, the instance from
``deploy/dagster.postgres.yaml`` and the catalogue on PostgreSQL.

It drains a backlog, survives a restart of the code server while runs are in flight (no card lost,
none processed twice, no attempt spent on runs the queue could not launch), and stops everything
it started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest
import sqlalchemy as sa
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.instance.ref import InstanceRef

from stage_e_dagster.catalog.engine import make_engine, session_scope
from stage_e_dagster.catalog.models import Card, ImageEvidence, MicroBatch, ScanLog
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.defs.instance import PROJECT_ROOT
from tests.conftest import create_pg_database, drop_pg_database

from .conftest import free_port
from .test_daemon import assert_no_duplicates

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SCRIPT = PROJECT_ROOT / "scripts" / "topology.py"
CARDS = 8


class Services:
    """``scripts/topology.py`` driven as a user would, with this test's databases and images."""

    def __init__(self, tmp_path: Path, catalog_url: str, dagster_url: str, images: Path) -> None:
        self.dir = tmp_path / "topology"
        self.ports = [free_port(), free_port()]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))} | {
            "DAGSTER_PG_URL": dagster_url,
            "STAGE_E_DATABASE_URL": catalog_url,
            "STAGE_E_STATE_DIR": str(tmp_path / "state"),
            "STAGE_E_STREAMING_ENABLED": "true",
            "STAGE_E_IMAGE_ROOTS": str(images),
            "STAGE_E_HOST_LOAD_CEILING": "1000",
            "STAGE_E_CPU_PRESSURE_CEILING": "100",
            "STAGE_E_RSS_MB_CEILING": "100000",
            "STAGE_E_OCR_PASS": "cheap",  # a drill of the topology, not of the readings
            "STAGE_E_MICRO_BATCH_SIZE": "2",
            "STAGE_E_MAX_CONCURRENT_DISPATCHES": "2",
        }
        self.engine = make_engine(catalog_url)

    def script(self, *args: str, timeout_s: float = 400) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(SCRIPT), *args, "--dir", str(self.dir),
                   "--grpc-port", str(self.ports[0]), "--web-port", str(self.ports[1])]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def pids(self) -> dict[str, int | None]:
        out = self.script("status")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def instance(self) -> DagsterInstance:
        os.environ["DAGSTER_PG_URL"] = self.env["DAGSTER_PG_URL"]
        return DagsterInstance.from_ref(InstanceRef.from_dir(str(self.dir / "dagster_home")))

    def counts(self) -> dict[str, int]:
        with session_scope(self.engine) as session:
            one = lambda q: session.execute(q).scalar_one()  # noqa: E731
            return {
                "waiting": one(sa.select(sa.func.count()).select_from(Card)
                               .where(sa.or_(Card.stage_c_pending, Card.stage_d_pending))),
                "in_flight": one(sa.select(sa.func.count()).select_from(MicroBatch)
                                 .where(MicroBatch.status.in_(("pending", "running")))),
                "succeeded": one(sa.select(sa.func.count()).select_from(MicroBatch)
                                 .where(MicroBatch.status == "succeeded")),
                "evidence_cards": one(sa.select(sa.func.count(sa.distinct(ImageEvidence.card_id)))),
            }

    def wait_until(self, done: Callable[[], bool], *, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in self.dir.glob("*.log"))
        raise AssertionError(f"timed out waiting for {what}; counts {self.counts()}\n{logs}")


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    catalog_url = create_pg_database("stage_e_topology_catalog")
    dagster_url = create_pg_database("stage_e_topology_dagster", migrate=False)
    engine = make_engine(catalog_url)
    seed_corpus(engine, tmp_path / "corpus", cards=CARDS, seed=7)
    engine.dispose()
    stack = Services(tmp_path, catalog_url, dagster_url, tmp_path / "corpus")
    try:
        yield stack
    finally:
        stack.script("down")
        stack.engine.dispose()
        drop_pg_database(catalog_url)
        drop_pg_database(dagster_url)


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def test_separate_services_drain_the_backlog_through_a_code_server_restart(services: Services) -> None:
    seeded = services.counts()["waiting"]
    started = services.script("up")
    assert started.returncode == 0, started.stderr + started.stdout
    pids = services.pids()
    assert all(pids.values()), pids
    assert len(set(pids.values())) == 3  # three processes, not one `dagster dev`

    # The webserver loads the location from the code server, not in process.
    entries = _graphql(services.ports[1], "{ workspaceOrError { ... on Workspace { locationEntries { name "
                                          "displayMetadata { key value } } } } }")
    [entry] = entries["data"]["workspaceOrError"]["locationEntries"]
    metadata = {item["key"]: item["value"] for item in entry["displayMetadata"]}
    assert entry["name"] == "stage_e_dagster" and metadata.get("port") == str(services.ports[0]), metadata

    instance = services.instance()

    def a_run_in_flight_after_a_success() -> bool:
        going = instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.QUEUED]))
        return services.counts()["succeeded"] >= 1 and going >= 1

    services.wait_until(a_run_in_flight_after_a_success, timeout_s=400, what="a run in flight after a success")
    old_server = pids["code-server"]
    restarted = services.script("restart", "code-server")
    assert restarted.returncode == 0, restarted.stderr
    assert services.pids()["code-server"] not in (None, old_server)

    services.wait_until(lambda: services.counts()["waiting"] == 0 and services.counts()["in_flight"] == 0,
                        timeout_s=600, what="the backlog to drain after the restart")
    after = services.counts()
    assert seeded == CARDS and after["evidence_cards"] == CARDS
    assert_no_duplicates(services.engine)
    with session_scope(services.engine) as session:
        parked = session.execute(sa.select(ScanLog).where(ScanLog.reason == "dispatch-attempts-exhausted")).all()
        failed = session.execute(
            sa.select(MicroBatch.batch_key, MicroBatch.failure_reason).where(MicroBatch.status == "failed")
        ).all()
    # The queue retries a launch while the code server is away, and a run that never took its batch
    # spends no attempt: the restart fails no batch and parks no card.
    assert parked == [] and failed == []
    # Each card went through exactly one succeeded batch: none was run twice to completion.
    with session_scope(services.engine) as session:
        done = session.execute(sa.select(MicroBatch.card_ids).where(MicroBatch.status == "succeeded")).scalars()
        processed = sorted(card for ids in done for card in ids)
    assert len(processed) == len(set(processed)) == CARDS

    stopped = services.script("down")
    assert stopped.returncode == 0 and "code-server" in stopped.stdout, stopped.stderr
    assert services.pids() == {"code-server": None, "daemon": None, "webserver": None}
    for port in services.ports:
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers after down"
