"""Migrations apply from empty on SQLite and PostgreSQL and leave no drift against the models."""

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import MIGRATIONS_DIR, current_revision, head_revision, schema_drift, upgrade
from tests.conftest import create_pg_database, drop_pg_database


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


def test_a_raw_sql_image_update_puts_the_card_back_in_the_stage_c_backlog(engine: sa.Engine) -> None:
    """The trigger of migration 0004: no writer has to remember a helper when it changes an image."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO cards (identifier, name, image_locator, declared_content_hash, content_hash,"
                " stage_c_pending, stage_d_pending, stage_c_attempts)"
                " VALUES ('t-1', 'Opt', 'file:///a.jpg', 'aaa', 'aaa', false, false, 2),"
                "        ('t-2', 'Opt', 'file:///b.jpg', NULL, 'bbb', false, false, 0)"
            )
        )
    state = "SELECT image_locator, declared_content_hash, content_hash, stage_c_pending, stage_c_attempts FROM cards"
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE cards SET image_locator = 'file:///a2.jpg' WHERE identifier = 't-1'"))
        conn.execute(sa.text("UPDATE cards SET name = 'Opt (renamed)' WHERE identifier = 't-2'"))
    with engine.connect() as conn:
        rows = conn.execute(sa.text(state + " ORDER BY identifier")).all()
    # A new locator: the old declared hash described the old image, so both hashes are forgotten.
    assert [tuple(r[:3]) + (bool(r[3]), r[4]) for r in rows] == [
        ("file:///a2.jpg", None, None, True, 0),
        ("file:///b.jpg", None, "bbb", False, 0),  # other columns change nothing
    ]
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE cards SET stage_c_pending = false, content_hash = 'ccc' WHERE identifier = 't-1'"))
        conn.execute(sa.text("UPDATE cards SET declared_content_hash = 'ddd' WHERE identifier = 't-1'"))
    with engine.connect() as conn:
        row = conn.execute(sa.text(state + " WHERE identifier = 't-1'")).one()
    assert (row[1], row[2], bool(row[3])) == ("ddd", "ddd", True)  # a declared hash is taken as the new one


def _migrate(engine: sa.Engine, direction: str, revision: str) -> None:
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = conn
        getattr(command, direction)(cfg, revision)


def _printed_names_round_trip(engine: sa.Engine) -> None:
    """0007 adds the printed-name columns to a catalogue with printings, and takes them away again."""
    upgrade(engine, "0006")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO expansions (code, name) VALUES ('ren', 'Renaissance')"))
        conn.execute(sa.text("INSERT INTO printings (expansion_id, name, normalized_name, collector_number, lang)"
                             " SELECT id, 'Sylvan Library', 'sylvan library', '158', 'fr' FROM expansions"))
    _migrate(engine, "upgrade", "0007")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE printings SET printed_name = 'Bibliothèque sylvestre',"
                             " face_names = '[\"A\", \"B\"]'"))
        row = conn.execute(sa.text("SELECT name, printed_name, face_names, printed_face_names FROM printings")).one()
    assert (row[0], row[1], row[3]) == ("Sylvan Library", "Bibliothèque sylvestre", None)
    faces = json.loads(row[2]) if isinstance(row[2], str) else row[2]
    assert faces == ["A", "B"]
    _migrate(engine, "downgrade", "0006")
    columns = {c["name"] for c in sa.inspect(engine).get_columns("printings")}
    assert not columns & {"printed_name", "face_names", "printed_face_names"}
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT name, lang FROM printings")).one() == ("Sylvan Library", "fr")
    upgrade(engine)
    assert current_revision(engine) == head_revision()


def test_printed_names_migration_up_and_down_on_sqlite(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'printed.sqlite'}")
    _printed_names_round_trip(engine)
    engine.dispose()


@pytest.mark.postgres
def test_printed_names_migration_up_and_down_on_postgres() -> None:
    url = create_pg_database(migrate=False)
    engine = make_engine(url)
    try:
        _printed_names_round_trip(engine)
    finally:
        engine.dispose()
        drop_pg_database(url)


def _heartbeats_round_trip(engine: sa.Engine) -> None:
    """0008 adds the sensor heartbeat table on top of 0007, and takes it away again."""
    upgrade(engine, "0007")
    _migrate(engine, "upgrade", "0008")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO sensor_heartbeats (sensor_name, ticked_at, interval_s, settings, ticked_by)"
                             " VALUES ('card_created_sensor', CURRENT_TIMESTAMP, 5, '{\"streaming_enabled\": true}',"
                             " 'host:1')"))
        assert conn.execute(sa.text("SELECT interval_s FROM sensor_heartbeats")).scalar_one() == 5
    _migrate(engine, "downgrade", "0007")
    assert "sensor_heartbeats" not in sa.inspect(engine).get_table_names()
    assert current_revision(engine) == "0007"
    upgrade(engine)
    assert current_revision(engine) == head_revision()


def test_heartbeats_migration_up_and_down_on_sqlite(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'heartbeats.sqlite'}")
    _heartbeats_round_trip(engine)
    engine.dispose()


@pytest.mark.postgres
def test_heartbeats_migration_up_and_down_on_postgres() -> None:
    url = create_pg_database(migrate=False)
    engine = make_engine(url)
    try:
        _heartbeats_round_trip(engine)
    finally:
        engine.dispose()
        drop_pg_database(url)
