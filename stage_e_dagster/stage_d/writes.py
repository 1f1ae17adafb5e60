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


def insert_ignore(
    session: Session, table: sa.Table, rows: Sequence[dict[str, Any]], returning: sa.Column | None = None
) -> list[Any]:
    """Insert ``rows``, skipping any that would break a unique index; return ``returning`` of the new ones.

    One cached statement run with many parameter sets: SQLAlchemy batches it into multi-row
    VALUES ("insertmanyvalues") on both back ends.
    """
    if not rows:
        return []
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(table).on_conflict_do_nothing()
    conn = session.connection()
    if returning is None:
        conn.execute(stmt, list(rows))
        return []
    return list(conn.execute(stmt.returning(returning), list(rows)).scalars())
