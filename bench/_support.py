"""Helpers the dispatch benchmarks share: a throwaway PostgreSQL database, the environment a tick
or run reads, and the summary statistics they print. Not part of the library."""

from __future__ import annotations

import os
import statistics
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import sqlalchemy as sa

PG_SERVER = os.environ.get("STAGE_E_BENCH_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


@contextmanager
def pg_database(prefix: str) -> Iterator[str]:
    """Create an empty PostgreSQL database on the local server, yield its URL, drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    server = sa.create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(PG_SERVER).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        server.dispose()


def streaming_environment(state_dir: Path, *, database_url: str, image_roots: Path | None = None,
                          batch_size: int = 25) -> None:
    """Turn streaming on for this process, with envelope bars a benchmark cannot cross.

    The default host-load ceiling is the core count; other jobs on a 2-core machine push the load
    over it, and a tick would then open a trip and skip instead of selecting work. The benchmarks
    measure dispatch cost, not the envelope, so no bar may stop them halfway.
    """
    os.environ.update({
        "STAGE_E_STREAMING_ENABLED": "true",
        "STAGE_E_STATE_DIR": str(state_dir),
        "STAGE_E_DATABASE_URL": database_url,
        "STAGE_E_MICRO_BATCH_SIZE": str(batch_size),
        "STAGE_E_MAX_CONCURRENT_DISPATCHES": "2",
        "STAGE_E_HOST_LOAD_CEILING": "1000",
        "STAGE_E_RSS_MB_CEILING": "100000",
        # The synthetic corpus has ~5% broken images on purpose; each is a counted fetch failure.
        "STAGE_E_FETCH_FAILURE_RATE_CEILING": "1",
    })
    if image_roots is not None:
        os.environ["STAGE_E_IMAGE_ROOTS"] = str(image_roots)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between the sorted values."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def short_count(n: int) -> str:
    """1000000 -> 1M, 10000 -> 10k, 2500 -> 2.5k."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            value = n / size
            return f"{value:g}{suffix}"
    return str(n)
