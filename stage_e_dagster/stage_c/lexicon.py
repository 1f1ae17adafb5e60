"""The set-code lexicon: every expansion code in the catalogue, lower-cased."""

from __future__ import annotations

import sqlalchemy as sa

from ..catalog.models import Expansion


def known_set_codes(engine: sa.Engine) -> frozenset[str]:
    with engine.connect() as conn:
        return frozenset(code.lower() for code in conn.execute(sa.select(Expansion.code)).scalars())
