"""The global fetch pacer: one request slot per interval per destination, shared by every process.

The next free slot lives in the ``fetch_pacer`` table and is advanced atomically (a row-locking
UPDATE ... RETURNING on PostgreSQL, an IMMEDIATE transaction on SQLite), so N workers together
keep to the configured rate. Throttling widens the interval; clean responses narrow it again. The
destination's last clean answer is kept too: a card throttled while the host serves others is
unlucky, not bad, and its own delay starts over (see ``stage_c.persist``).
"""

from __future__ import annotations

import time

import sqlalchemy as sa

MAX_BACKOFF_SCALE = 16.0
# A host's Retry-After is honoured up to this many seconds; beyond it the card is simply deferred.
MAX_RETRY_AFTER_S = 30.0
# Each clean response shrinks the backoff multiplier by this factor (about 23 responses halve it).
RELAX_FACTOR = 0.97
# A clean answer is written at most this often per destination while there is no backoff to decay.
LAST_OK_RESOLUTION_S = 1.0


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


def relax(engine: sa.Engine, destination: str, *, now: float | None = None) -> None:
    """A clean response: decay the backoff multiplier towards 1 and note the answer (no write while
    there is no backoff and the last answer noted is under a second old)."""
    now = time.time() if now is None else now
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE fetch_pacer SET interval_scale = CASE WHEN interval_scale * :f < 1 THEN 1.0 "
                "ELSE interval_scale * :f END, last_ok_at = :now WHERE name = :name AND "
                "(interval_scale > 1 OR last_ok_at IS NULL OR last_ok_at < :stale)"
            ),
            {"name": destination, "f": RELAX_FACTOR, "now": now, "stale": now - LAST_OK_RESOLUTION_S},
        )


def last_answered_at(engine: sa.Engine, destination: str) -> float | None:
    """Epoch second of the destination's last clean answer to any process; None when none is known."""
    with engine.connect() as conn:
        value = conn.execute(
            sa.text("SELECT last_ok_at FROM fetch_pacer WHERE name = :name"), {"name": destination}
        ).scalar_one_or_none()
    return None if value is None else float(value)
