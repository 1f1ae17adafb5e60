"""A real Dagster instance and a real catalogue with synthetic card images, for sensor ticks and runs.

Runs execute in process (the same code the run worker executes); the daemon tests in
``test_daemon.py`` run the real daemon in a child process instead.
"""

from __future__ import annotations

import http.server
import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
import sqlalchemy as sa
from dagster import (
    DagsterInstance,
    DeleteDynamicPartitionsRequest,
    SensorResult,
    build_sensor_context,
    instance_for_test,
)

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.code_server import free_port  # noqa: F401  (the tests import it from here)
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.partitions import micro_batches
from stage_e_dagster.defs.resources import StageEResource

INSTANCE_OVERRIDES = {"concurrency": {"pools": {"granularity": "run", "default_limit": 2}}}


@pytest.fixture(scope="session")
def corpus_template(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Path:
    """A small seeded corpus (images + labels + catalogue file), built once and copied per test."""
    folder = tmp_path_factory.mktemp("corpus")
    shutil.copy(sqlite_template, folder / "catalog.sqlite")
    engine = make_engine(f"sqlite:///{folder / 'catalog.sqlite'}")
    seed_corpus(engine, folder / "corpus", cards=10, seed=11)
    engine.dispose()
    return folder


@dataclass
class Pipeline:
    """One test's catalogue, instance and images, and the calls that drive sensors and runs."""

    url: str
    engine: sa.Engine
    instance: DagsterInstance
    images: Path
    cursors: dict[str, str | None] = field(default_factory=dict)

    def resource(self) -> StageEResource:
        return StageEResource(database_url=self.url)

    def tick(self, sensor_name: str) -> Any:
        sensor = defs.resolve_sensor_def(sensor_name)
        context = build_sensor_context(
            instance=self.instance,
            cursor=self.cursors.get(sensor_name),
            resources={"stage_e": self.resource()},
            definitions=defs,
        )
        result = sensor(context)
        if isinstance(result, SensorResult):
            if result.cursor is not None:
                self.cursors[sensor_name] = result.cursor
            for request in result.dynamic_partitions_requests or []:
                if isinstance(request, DeleteDynamicPartitionsRequest):
                    for key in request.partition_keys:
                        self.instance.delete_dynamic_partition(request.partitions_def_name, key)
                else:
                    self.instance.add_dynamic_partitions(micro_batches.name, list(request.partition_keys))
            for event in result.asset_events or []:
                self.instance.report_runless_asset_event(event)
        return result

    def run(self, partition_key: str, tags: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        job = defs.resolve_job_def("stage_e_dispatch")
        return job.execute_in_process(
            partition_key=partition_key,
            instance=self.instance,
            raise_on_error=False,
            tags=tags or {},
        )

    def run_failing_in_stage_c(self, partition_key: str, tags: dict[str, str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
        """Run the batch with Stage C raising ``RuntimeError: stage C broke`` after the run took it."""

        def broken_stage_c(*args: object, **kwargs: object) -> None:
            raise RuntimeError("stage C broke")

        with monkeypatch.context() as patched:
            # the conveyor imports Stage C when a run first needs it, so the stub goes where it is read
            patched.setattr("stage_e_dagster.stage_c.run.run_stage_c", broken_stage_c)
            return self.run(partition_key, tags=tags)

    def drain(self, sensor_name: str = "card_created_sensor", max_ticks: int = 20) -> list[str]:
        """Tick and run every requested batch until the sensor asks for nothing; returns the run ids."""
        run_ids = []
        for _ in range(max_ticks):
            result = self.tick(sensor_name)
            requests = result.run_requests if isinstance(result, SensorResult) else []
            if not requests:
                return run_ids
            for request in requests:
                outcome = self.run(request.partition_key, tags=dict(request.tags))
                run_ids.append(outcome.run_id)
        raise AssertionError(f"{sensor_name} still requesting runs after {max_ticks} ticks")


@pytest.fixture
def pipeline(corpus_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    shutil.copy(corpus_template / "catalog.sqlite", tmp_path / "catalog.sqlite")
    images = corpus_template / "corpus"
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    monkeypatch.setenv("STAGE_E_DATABASE_URL", url)
    monkeypatch.setenv("STAGE_E_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("STAGE_E_IMAGE_ROOTS", str(images))
    monkeypatch.setenv("STAGE_E_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("STAGE_E_HOST_LOAD_CEILING", "1000")
    monkeypatch.setenv("STAGE_E_CPU_PRESSURE_CEILING", "100")  # the machine's own contention decides no test
    monkeypatch.setenv("STAGE_E_MAX_CONCURRENT_DISPATCHES", "2")  # the pool of INSTANCE_OVERRIDES, whatever the CPUs
    monkeypatch.setenv("STAGE_E_RSS_MB_CEILING", "100000")
    monkeypatch.setenv("STAGE_E_ARRIVAL_WAIT_S", "0")  # a tick returns at once; test_arrivals.py holds the watch
    engine = make_engine(url)
    with instance_for_test(overrides=INSTANCE_OVERRIDES) as instance:
        yield Pipeline(url=url, engine=engine, instance=instance, images=images)
    engine.dispose()


class ImageServer:
    """A real HTTP server on 127.0.0.1 serving the corpus images, with per-path status overrides and,
    given ``throttle_share``, a storm: that share of requests, at random, answered 429. Between
    ``hold()`` and ``release()`` every request waits (a run stays in its fetch until the test acts)."""

    def __init__(self, root: Path, *, throttle_share: float = 0.0, seed: int = 19) -> None:
        self.root = root
        self.status: dict[str, int] = {}
        self.requests: list[str] = []
        self.served: list[str] = []
        self.throttled = 0
        self.delay_s = 0.0
        self.throttle_share = throttle_share
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                name = self.path.lstrip("/")
                server.requests.append(name)
                server._released.wait(timeout=600)
                if server.delay_s:
                    time.sleep(server.delay_s)
                status = server.status.get(name, 200)
                with server._lock:
                    if server.throttle_share and server._rng.random() < server.throttle_share:
                        status = 429
                        server.throttled += 1
                path = server.root / name
                if status == 200 and path.is_file():
                    server.served.append(name)
                    body = path.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(status if status != 200 else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def image_server(corpus_template: Path) -> Iterator[ImageServer]:
    server = ImageServer(corpus_template / "corpus")
    yield server
    server.close()
