"""A database password never leaks: not into logs, tick history, run tags, metadata, CLI output or tracebacks.

The catalogue and the Dagster instance both live on a PostgreSQL role that has a password. The real
daemon ticks the sensors and launches the runs; the CLI's success and error paths run as a user
runs them; then everything Dagster and the catalogue stored, and everything printed, is searched for
the password. The server here trusts 127.0.0.1, so a wrong password alone would still connect: the
"wrong credentials" path uses an unknown role with a wrong password instead.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa
from dagster import DagsterRunStatus

from stage_e_dagster.catalog.engine import DatabaseUrlError, make_engine, masked_url
from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.definitions import defs
from stage_e_dagster.defs.instance import PROJECT_ROOT
from stage_e_dagster.defs.resources import StageEResource
from tests.conftest import PG_SERVER_URL, pg_server_engine

from .test_daemon import Stack

SERVER = sa.make_url(PG_SERVER_URL)


def _url(role: str, password: str, database: str, *, port: int | None = None) -> str:
    host = SERVER.host or "127.0.0.1"
    return f"postgresql+psycopg2://{role}:{password}@{host}:{port or SERVER.port or 5432}/{database}"


class SecretRole:
    """A login role with a password and the two databases it owns: the catalogue and Dagster's instance."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.role = f"stage_e_secret_{tag}"
        # Long and random, so a hit can only be a leak; hex keeps it URL-safe.
        self.password = f"pw{uuid.uuid4().hex}{uuid.uuid4().hex}"
        self.catalog_db = f"{self.role}_catalog"
        self.dagster_db = f"{self.role}_dagster"

    def create(self) -> None:
        server = pg_server_engine()
        with server.connect() as conn:
            conn.execute(sa.text(f"CREATE ROLE \"{self.role}\" LOGIN PASSWORD '{self.password}'"))
            for name in (self.catalog_db, self.dagster_db):
                conn.execute(sa.text(f'CREATE DATABASE "{name}" OWNER "{self.role}"'))
        server.dispose()

    def drop(self) -> None:
        server = pg_server_engine()
        with server.connect() as conn:
            for name in (self.catalog_db, self.dagster_db):
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{self.role}"'))
        server.dispose()

    def url(self, database: str | None = None, **kwargs: object) -> str:
        return _url(self.role, self.password, database or self.catalog_db, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def secret_role() -> Iterator[SecretRole]:
    role = SecretRole()
    role.create()
    try:
        yield role
    finally:
        role.drop()


def _every_row_as_text(url: str) -> Iterator[tuple[str, str]]:
    """(table, row text) for every row of every table in the database, read as the server's superuser."""
    engine = sa.create_engine(SERVER.set(database=sa.make_url(url).database))
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
                )
            ).all()
            for schema, table in tables:
                for (row,) in conn.execute(sa.text(f'SELECT CAST(t AS text) FROM "{schema}"."{table}" AS t')):
                    yield f"{schema}.{table}", row
    finally:
        engine.dispose()


def _files_under(root: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield str(path), path.read_bytes().decode("utf-8", errors="replace")


def _unwrapped(text: str) -> str:
    """The text without whitespace and box-drawing characters, so a password that Rich wrapped across
    the lines of a traceback panel is still found."""
    return re.sub(r"[\s\u2500-\u257f]+", "", text)


def _leaks(password: str, sources: Iterator[tuple[str, str]]) -> list[str]:
    found = []
    for where, text in sources:
        flat = _unwrapped(text)
        at = flat.find(password)
        if at >= 0:
            found.append(f"{where}: ...{flat[max(0, at - 120):at + 40]}...")
    return found


UNPARSABLE = {
    "no colon after the scheme": "postgresql+psycopg2//stage_e:hunter2secret@db:5432/stage_e",
    "a port that is not a number": "postgresql+psycopg2://stage_e:hunter2secret@db:port/stage_e",
    "one slash": "postgresql+psycopg2:/stage_e:hunter2secret@db/stage_e",
}


@pytest.mark.parametrize("url", UNPARSABLE.values(), ids=UNPARSABLE.keys())
def test_a_url_that_does_not_parse_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(DatabaseUrlError) as refused:
        make_engine(url)
    assert "hunter2secret" not in str(refused.value)
    assert "***@db" in str(refused.value)


def test_masked_url_keeps_everything_but_the_password() -> None:
    assert masked_url("postgresql+psycopg2://stage_e:hunter2secret@db:5432/x") == "postgresql+psycopg2://stage_e:***@db:5432/x"
    assert masked_url("sqlite:////var/lib/stage_e/catalog.sqlite") == "sqlite:////var/lib/stage_e/catalog.sqlite"


def test_the_resource_repr_masks_its_url() -> None:
    resource = StageEResource(database_url="postgresql+psycopg2://stage_e:hunter2secret@db:5432/x")
    assert "hunter2secret" not in repr(resource) and "hunter2secret" not in str(resource)
    assert resource.database_url.endswith(":hunter2secret@db:5432/x")  # the value itself is intact


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(1500)  # about 150 s on an idle machine: a daemon drain, a failing daemon, ten CLI calls
def test_a_password_in_the_database_urls_appears_nowhere(
    secret_role: SecretRole, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = secret_role.password
    catalog_url = secret_role.url()
    dagster_url = secret_role.url(secret_role.dagster_db)
    stack = Stack(
        tmp_path,
        catalog_url,
        tmp_path / "corpus",
        instance_yaml=PROJECT_ROOT / "deploy" / "dagster.postgres.yaml",
        extra_env={"DAGSTER_PG_URL": dagster_url},
    )
    outputs: list[tuple[str, str]] = []

    def cli(name: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        saved = stack.env
        stack.env = saved | (env or {})
        try:
            done = stack.stage_e(*args)
        finally:
            stack.env = saved
        outputs.append((f"stage-e {' '.join(args)} ({name})", done.stdout + done.stderr))
        return done.returncode, done.stdout + done.stderr

    try:
        # Migrate through the CLI, then load a small corpus as the role.
        code, text = cli("migrate", "db", "upgrade")
        assert code == 0 and "upgraded" in text, text
        seed_corpus(stack.engine, tmp_path / "corpus", cards=4, seed=5)
        cards = stack.counts()["cards"]

        # The real daemon: sensor ticks on the role's catalogue, runs launched into the role's instance.
        stack.start()
        stack.wait_until(stack.idle, timeout_s=300, what="the backlog to drain on the password-bearing URLs")
        assert stack.counts()["evidence_cards"] == cards
        stack.stop()

        # A catalogue URL that does not parse (a typo'd scheme): the sensors' ticks fail on it.
        mistyped = catalog_url.replace("postgresql+psycopg2://", "postgresql+psycopg2//", 1)
        stack.env = stack.env | {"STAGE_E_DATABASE_URL": mistyped}
        stack.start()
        instance = stack.instance()
        sensor_name = defs.resolve_sensor_def("card_created_sensor").name

        def a_failed_tick() -> bool:
            for state in instance.all_instigator_state():
                if state.instigator_name == sensor_name:
                    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=5)
                    return any(tick.status.value == "FAILURE" for tick in ticks)
            return False

        stack.wait_until(a_failed_tick, timeout_s=120, what="a sensor tick failing on the mistyped URL")
        stack.stop()
        stack.env = stack.env | {"STAGE_E_DATABASE_URL": catalog_url}

        # Failing runs in this process, recorded in the role's instance: the catalogue at a wrong
        # port, at an unknown role with a wrong password, and a URL that does not parse.
        job = defs.resolve_job_def("stage_e_dispatch")
        partition = instance.get_dynamic_partitions("micro_batches")[0]
        bad_urls = {
            "wrong port": secret_role.url(port=1),
            "wrong role and password": _url("nobody_" + secret_role.role, secret + "x", secret_role.catalog_db),
            "mistyped": mistyped,
        }
        for env in ("STAGE_E_STATE_DIR", "STAGE_E_STREAMING_ENABLED", "STAGE_E_IMAGE_ROOTS"):
            monkeypatch.setenv(env, stack.env[env])
        for bad in bad_urls.values():
            monkeypatch.setenv("STAGE_E_DATABASE_URL", bad)
            result = job.execute_in_process(partition_key=partition, instance=instance, raise_on_error=False)
            assert not result.success
            assert instance.get_run_by_id(result.run_id).status == DagsterRunStatus.FAILURE

        # The CLI as a person uses it: status (text and JSON), and its error paths, with and without
        # the debug traceback.
        for name, args in (("status", ("status",)), ("status json", ("status", "--json"))):
            code, text = cli(name, *args)
            assert code == 0 and f"{secret_role.role}:***@" in text, text  # the URL is shown, masked
        for name, bad in bad_urls.items():
            code, text = cli(name, "status", env={"STAGE_E_DATABASE_URL": bad})
            assert code == 1 and text.startswith("stage-e: error:") and ":***@" in text, text
        for name in ("wrong port", "mistyped"):
            debug = {"STAGE_E_DATABASE_URL": bad_urls[name], "STAGE_E_DEBUG": "1"}
            code, text = cli(name + ", debug", "status", env=debug)
            assert code != 0 and "Traceback" in text, text
        code, text = cli("bad port number", "status", env={"STAGE_E_DATABASE_URL": secret_role.url().replace(
            f":{SERVER.port or 5432}/", ":port/")})
        assert code != 0, text

        # Everything stored and everything printed.
        captured = capfd.readouterr()
        outputs.append(("this test's stdout", captured.out))
        outputs.append(("this test's stderr", captured.err))
        searched = (
            list(_every_row_as_text(dagster_url))
            + list(_every_row_as_text(catalog_url))
            + list(_files_under(stack.home))
            + [("daemon log", stack.log.read_text())]
            + outputs
        )
        assert any(where.startswith("public.job_ticks") for where, _ in searched), "no tick history was searched"
        assert any(where.startswith("public.event_logs") for where, _ in searched), "no event log was searched"
        leaks = _leaks(secret, iter(searched))
        assert leaks == [], "the password leaked into:\n" + "\n".join(leaks)
    finally:
        stack.stop()
        stack.engine.dispose()
