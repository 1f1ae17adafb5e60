"""The one declarative base, its naming convention and the column types every model shares."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Timezone-aware UTC on both back ends; SQLite would otherwise hand back naive values."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# BigInteger is INTEGER on SQLite so that it stays an alias of the rowid and autoincrements.
BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

intpk = Annotated[int, mapped_column(BigIntPK, primary_key=True, autoincrement=True)]
created_at = Annotated[
    datetime, mapped_column(UTCDateTime(), default=utcnow, server_default=sa.func.now(), nullable=False)
]


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {
        datetime: UTCDateTime(),
        dict[str, Any]: sa.JSON(),
        dict[str, str]: sa.JSON(),
        list[Any]: sa.JSON(),
        int: sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
    }
