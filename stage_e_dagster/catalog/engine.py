"""Engines and sessions for the catalogue, on SQLite (embedded) or PostgreSQL (production)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

READ_ONLY = "stage_e_read_only"


class DatabaseUrlError(ValueError):
    """The catalogue URL names a driver this project does not ship."""


# The password of user:password@ in a URL that may not parse: from the ':' after the user (just past
# '//', or at the start when there is no '//') to the last '@'.
_PASSWORD_AFTER_SLASHES = re.compile(r"(?P<head>//[^\s:/@]*):\S*@")
_PASSWORD_AT_START = re.compile(r"^(?P<head>[^\s:/@]*):\S*@")


def masked_url(url: str) -> str:
    """``url`` fit to print: its password replaced by ``***``, even when the URL does not parse.

    Catalogue URLs carry the database password, and error messages end up in tick history, run
    events and logs, so every message that names a URL goes through this."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        pattern = _PASSWORD_AFTER_SLASHES if "//" in url else _PASSWORD_AT_START
        return pattern.sub(r"\g<head>:***@", url)


def _check_url(url: str) -> sa.URL:
    try:
        parsed = make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise DatabaseUrlError(f"not a database URL: {masked_url(url)!r}") from exc
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg2"):
        raise DatabaseUrlError(
            f"unsupported database URL scheme {parsed.drivername!r}: use sqlite:///PATH or postgresql+psycopg2://..."
        )
    return parsed


def _configure_sqlite(engine: sa.Engine) -> None:
    # Every transaction takes the write lock up front (BEGIN IMMEDIATE) and waits up to 30 s for
    # it, so concurrent processes queue instead of failing on a read-to-write upgrade.
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        # A read-only scope (``read_scope``) begins deferred: under WAL it reads beside a writer
        # instead of queueing behind it for the write lock it will never use.
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")


def make_engine(url: str) -> sa.Engine:
    """A new engine for ``url``; SQLite files get their folder created."""
    parsed = _check_url(url)
    if parsed.drivername.startswith("sqlite"):
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30})
        _configure_sqlite(engine)
        return engine
    return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


@lru_cache(maxsize=16)
def engine_for(url: str) -> sa.Engine:
    """One shared engine per URL and process."""
    return make_engine(url)


def dialect_insert(session: Session):  # type: ignore[no-untyped-def]
    """The back end's own ``insert`` (SQLite or PostgreSQL), for ``ON CONFLICT`` compare-and-sets."""
    return (postgresql if session.get_bind().dialect.name == "postgresql" else sqlite).insert


@contextmanager
def session_scope(engine: sa.Engine) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any error."""
    with Session(engine, expire_on_commit=False) as session:
        with session.begin():
            yield session


@contextmanager
def read_scope(engine: sa.Engine) -> Iterator[Session]:
    """A session for reads only: on SQLite it takes no write lock (a deferred ``BEGIN``), so a probe
    repeated while a tick watches never queues behind, or holds up, another process's writes."""
    with Session(engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False) as session:
        with session.begin():
            yield session
