"""The global fetch pacer: one request slot per interval per destination, shared by every process.

The next free slot lives in the ``fetch_pacer`` table and is advanced atomically (a row-locking
UPDATE ... RETURNING on PostgreSQL, an IMMEDIATE transaction on SQLite), so N workers together
keep to the configured rate. Throttling widens the interval; clean responses narrow it again.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

MAX_BACKOFF_SCALE = 16.0
# A host's Retry-After is honoured up to this many seconds; beyond it the card is simply deferred.
MAX_RETRY_AFTER_S = 30.0
# Each clean response shrinks the backoff multiplier by this factor (about 23 responses halve it).
RELAX_FACTOR = 0.97


def _greatest(engine: sa.Engine) -> str:
    return "MAX" if engine.dialect.name == "sqlite" else "GREATEST"


def reserve_slot(engine: sa.Engine, destination: str, rate_per_sec: float, *, now: float | None = None) -> float:
    """Reserve the next request slot for ``destination``; returns the epoch second it starts."""
    now = time.time() if now is None else now
    interval = 1.0 / rate_per_sec
    greatest = _greatest(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO fetch_pacer (name, next_slot_at, interval_scale) VALUES (:name, :now, 1.0) "
                "ON CONFLICT (name) DO NOTHING"
            ),
            {"name": destination, "now": now},
        )
        start = conn.execute(
            sa.text(
                f"UPDATE fetch_pacer SET next_slot_at = {greatest}(next_slot_at, :now) + :interval * interval_scale "
                "WHERE name = :name RETURNING next_slot_at - :interval * interval_scale"
            ),
            {"name": destination, "now": now, "interval": interval},
        ).scalar_one()
    return float(start)


def wait_for_slot(engine: sa.Engine, destination: str, rate_per_sec: float) -> float:
    """Reserve a slot and sleep until it; returns the seconds slept."""
    delay = reserve_slot(engine, destination, rate_per_sec) - time.time()
    if delay > 0:
        time.sleep(delay)
        return delay
    return 0.0


def back_off(engine: sa.Engine, destination: str, retry_after_s: float | None = None) -> None:
    """A 429/503: double the interval for every process (capped) and honour ``Retry-After``."""
    hold_until = time.time() + min(max(retry_after_s or 0.0, 0.0), MAX_RETRY_AFTER_S)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE fetch_pacer SET interval_scale = CASE WHEN interval_scale * 2 > :cap THEN :cap "
                f"ELSE interval_scale * 2 END, next_slot_at = {_greatest(engine)}(next_slot_at, :hold) "
                "WHERE name = :name"
            ),
            {"name": destination, "cap": MAX_BACKOFF_SCALE, "hold": hold_until},
        )


def relax(engine: sa.Engine, destination: str) -> None:
    """A clean response: decay the backoff multiplier towards 1 (no write when there is none)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE fetch_pacer SET interval_scale = CASE WHEN interval_scale * :f < 1 THEN 1.0 "
                "ELSE interval_scale * :f END WHERE name = :name AND interval_scale > 1"
            ),
            {"name": destination, "f": RELAX_FACTOR},
        )
