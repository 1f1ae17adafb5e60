"""Migrations apply from empty on SQLite and PostgreSQL and leave no drift against the models."""

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import MIGRATIONS_DIR, current_revision, head_revision, schema_drift, upgrade


def test_there_is_exactly_one_head() -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert len(ScriptDirectory.from_config(cfg).get_heads()) == 1


def test_sqlite_migrates_from_empty_to_head_without_drift(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert schema_drift(engine) == []
    upgrade(engine)  # a second upgrade is a no-op
    assert current_revision(engine) == head_revision()


@pytest.mark.postgres
def test_postgres_migrates_from_empty_to_head_without_drift(pg_url_fresh: str) -> None:
    engine = make_engine(pg_url_fresh)
    assert current_revision(engine) == head_revision()  # the fixture migrated it from empty
    assert schema_drift(engine) == []
    engine.dispose()


def test_raw_sql_inserts_land_in_the_stage_c_backlog(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO cards (identifier, name, image_locator) VALUES ('raw-1', 'Opt', 'file:///x.jpg')")
        )
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT stage_c_pending, stage_d_pending, printing_status, created_at FROM cards")
        ).one()
    assert bool(row[0]) is True and bool(row[1]) is False and row[2] == "unresolved" and row[3] is not None
