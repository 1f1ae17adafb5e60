"""Insert-or-ignore on both back ends, so duplicate votes and pass markers are silently skipped.

``ON CONFLICT DO NOTHING`` without a target covers every unique index, the partial ones on
printing_votes included; on PostgreSQL a conflicting row another transaction is still writing makes
the insert wait for that transaction, then skip, so concurrent runs never raise IntegrityError.
"""

from __future__ import annotations

from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

_ROWS_PER_STATEMENT = 400


def insert_ignore(
    session: Session, table: sa.Table, rows: Sequence[dict[str, Any]], returning: sa.Column | None = None
) -> list[Any]:
    """Insert ``rows``, skipping any that would break a unique index; return ``returning`` of the new ones."""
    if not rows:
        return []
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    written: list[Any] = []
    conn = session.connection()
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        stmt = insert(table).values(list(rows[start:start + _ROWS_PER_STATEMENT])).on_conflict_do_nothing()
        if returning is not None:
            written.extend(conn.execute(stmt.returning(returning)).scalars())
        else:
            conn.execute(stmt)
    return written
