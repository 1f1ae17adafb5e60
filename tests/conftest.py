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


# The longest tests, longest first (seconds in one `make test` with two workers, 2026-12-05): 327, 207,
# 160, 127, 101 and 92. Each took 1.5-5 minutes; the next took 74 s.
LONGEST = (
    "tests/orchestration/test_throttle_storm.py::",
    "tests/orchestration/test_daemon.py::test_a_sweep_outlives_a_trip",
    # 204 s beside other test runs (2026-12-06): a sweep through a code-server outage of 75 s or more.
    "tests/orchestration/test_code_server_restart.py::",
    "tests/orchestration/test_fault_drills.py::test_two_daemons_on_one_postgres_instance",
    "tests/orchestration/test_screenshots.py::",
    "tests/orchestration/test_daemon.py::test_a_trip_holds_a_sweeps_queued_runs",
    "tests/orchestration/test_fault_drills.py::test_the_run_end_cursor_passes",
)


def _run_order(item: pytest.Item) -> tuple[int, bool]:
    rank = next((i for i, prefix in enumerate(LONGEST) if item.nodeid.startswith(prefix)), len(LONGEST))
    return rank, item.get_closest_marker("slow") is None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first, then the other slow ones (daemons, drills, benchmarks' smoke runs), then the rest.

    ``make test`` runs two xdist workers that steal work from each other. Run in file order, the
    five-minute storm drill started last and ran alone while the other worker idled (24 min in all);
    longest first, the short tests fill both workers at the end (22 min). The order within a group is kept."""
    items.sort(key=_run_order)


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
