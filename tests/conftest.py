"""Shared fixtures: a migrated catalogue on SQLite (a copied template per test) and on PostgreSQL.

PostgreSQL tests get one throwaway database per test session, migrated once, and every table is
emptied after each test. Tests that cross processes take ``pg_url_fresh`` for a database of their own.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

from stage_e_dagster.catalog.base import Base
from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade

PG_SERVER_URL = os.environ.get("STAGE_E_TEST_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")

for _name in list(os.environ):
    if _name.startswith("STAGE_E_") and _name != "STAGE_E_TEST_PG_URL":
        del os.environ[_name]
# Tests that go through settings (the CLI, daemons, runs, the benchmarks' smoke runs) need Stage C to
# have run, not to read well: the reader's cheap pass keeps them short. The reader's own tests call
# Stage C directly, whose default is the full pass; a test that wants the full pass through settings
# sets STAGE_E_OCR_PASS=full itself.
os.environ["STAGE_E_OCR_PASS"] = "cheap"
# pytest-xdist's workers inherit COLUMNS=80 and LINES=24 from execnet, where a plain run has neither:
# the CLI's tables would then wrap at 80 columns under `make test` and not under `pytest`.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


# The longest tests with their seconds, longest first: each run alone on 2026-12-06 after the cuts of
# that day, on the 2-core machine while others loaded it (load 4-15; about twice what the same test
# takes in a quiet `make test`). Only their ratios matter: they decide which worker's share a test goes
# to (pytest_collection_modifyitems). The throttle storm and the bench smoke tests were cut again that
# evening (the storm's host paced ten times faster, the smoke runs smaller): each was run alone before and
# after, side by side (load 1.3-5.5), and its figure here is the earlier one times after/before, to keep
# the footing of the rest (storm 349 -> 128 s, end_to_end 79 -> 58, streaming_vs_bulk 66 -> 62,
# scale 71 -> 29, the four tick-bench smoke tests 25-42 -> 4-8 s each).
LONGEST: tuple[tuple[str, float], ...] = (
    ("tests/orchestration/test_daemon.py::test_a_sweep_outlives_a_trip", 344),
    ("tests/bench/test_benchmarks.py::test_streaming_vs_bulk_bench", 242),
    ("tests/orchestration/test_fault_drills.py::test_two_daemons_on_one_postgres_instance", 240),
    ("tests/bench/test_benchmarks.py::test_end_to_end_bench", 220),
    # a sweep through a code-server outage of 75 s or more
    ("tests/orchestration/test_code_server_restart.py::", 218),
    ("tests/orchestration/test_daemon.py::test_a_trip_holds_a_sweeps_queued_runs", 217),
    ("tests/orchestration/test_throttle_storm.py::", 180),
    ("tests/orchestration/test_drills.py::test_raw_sql_writes_behind_a_running_daemon", 157),
    ("tests/orchestration/test_screenshots.py::", 131),
    ("tests/stage_d/test_corpus.py::test_precision_and_no_wrong_resolutions", 126),
    # each of the two faults, the model failing on every crop and the model unable to load
    ("tests/orchestration/test_failures_cannot_hide.py::", 120),
    ("tests/orchestration/test_fault_drills.py::test_the_run_end_cursor_passes", 112),
    ("tests/bench/test_benchmarks.py::test_scale_bench", 66),
    # slow (they cross processes) but short now: counted at SLOW_S they would weigh four times their time
    ("tests/bench/test_benchmarks.py::test_sensor_", 15),
)
# What any other slow test counts for when the shares are made (most took 30-100 s, measured as above).
SLOW_S = 60.0


def _expected_s(item: pytest.Item) -> float | None:
    """The seconds a long test is expected to take; None for a short one."""
    seconds = next((s for prefix, s in LONGEST if item.nodeid.startswith(prefix)), None)
    if seconds is None and item.get_closest_marker("slow") is not None:
        seconds = SLOW_S
    return seconds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Two shares of about the same seconds, each its long tests first (longest first), then short ones.

    ``make test`` runs two xdist workers with ``--dist worksteal``: the first worker is sent the first
    half of the collection and the other the rest, and a worker whose queue runs out takes the back
    half of the other's queue, never the test it runs nor the one queued after it. With every long test
    at the head of one list (until 2026-12-06) they all went to the first worker's half, and the two
    workers met among the long tests at the end, where the long test queued behind the running one
    could not be taken. Here the long tests are dealt, longest first, to the share with fewer seconds so
    far, the short tests fill the first share up to half the collection, and each worker ends on short
    tests the other can take (in a simulation of worksteal with the seconds above, the time one worker
    idled at the end fell from 70 s on average, 3-160 s, to about 2 s). Without xdist the order is the
    first share, then the second. Short tests keep the collection's order."""
    heavy = sorted(((s, i) for i, s in enumerate(map(_expected_s, items)) if s is not None), key=lambda p: -p[0])
    shares: tuple[list[int], list[int]] = ([], [])
    seconds = [0.0, 0.0]
    for s, i in heavy:
        side = 0 if seconds[0] <= seconds[1] else 1
        shares[side].append(i)
        seconds[side] += s
    taken = {i for _, i in heavy}
    short = [i for i in range(len(items)) if i not in taken]
    room = max(0, len(items) // 2 - len(shares[0]))
    order = shares[0] + short[:room] + shares[1] + short[room:]
    items[:] = [items[i] for i in order]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "catalog.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "catalog.sqlite"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()


def pg_server_engine() -> sa.Engine:
    """The local PostgreSQL server, outside any transaction (CREATE and DROP DATABASE, roles)."""
    return sa.create_engine(PG_SERVER_URL, isolation_level="AUTOCOMMIT")


def create_pg_database(prefix: str = "stage_e_test", *, migrate: bool = True) -> str:
    """Create a new PostgreSQL database (migrated to head unless told not to); return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    server = pg_server_engine()
    with server.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    server.dispose()
    url = sa.make_url(PG_SERVER_URL).set(database=name).render_as_string(hide_password=False)
    if migrate:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
    return url


def drop_pg_database(url: str) -> None:
    name = sa.make_url(url).database
    server = pg_server_engine()
    with server.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    server.dispose()


@pytest.fixture(scope="session")
def pg_session_url() -> Iterator[str]:
    url = create_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture
def pg_engine(pg_session_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(pg_session_url)
    yield engine
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture
def pg_url_fresh() -> Iterator[str]:
    url = create_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> sa.Engine:
    """The catalogue engine, once per back end."""
    name = "sqlite_engine" if request.param == "sqlite" else "pg_engine"
    return request.getfixturevalue(name)
