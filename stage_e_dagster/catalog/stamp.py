"""A cheap stamp of the catalogue's printings and sets, for the caches built from them.

Stage C's collector keys and Stage D's name index are each read with one query and kept per process;
this stamp, a handful of counts and highest ids, tells them when to read again.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .models import Expansion, Printing


def catalogue_stamp(conn: sa.Connection | Session) -> tuple[int, ...]:
    """Counts and highest ids of printings and expansions, how many printings carry a printed name,
    and how many sets a printed size.

    The last two move when a re-import fills those in place (no row added), so every process sees
    them, not only the one that imported.
    """
    row = conn.execute(
        sa.select(
            sa.select(sa.func.count()).select_from(Printing).scalar_subquery(),
            sa.select(sa.func.coalesce(sa.func.max(Printing.id), 0)).scalar_subquery(),
            sa.select(sa.func.count()).select_from(Expansion).scalar_subquery(),
            sa.select(sa.func.coalesce(sa.func.max(Expansion.id), 0)).scalar_subquery(),
            sa.select(sa.func.count(Printing.printed_name)).scalar_subquery(),
            sa.select(sa.func.count(Expansion.printed_size)).scalar_subquery(),
        )
    ).one()
    return tuple(int(v) for v in row)
