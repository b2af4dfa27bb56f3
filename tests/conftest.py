"""Shared fixtures: a real PostgreSQL (never mocked), a schema per test run, a clock tests can pin."""

from __future__ import annotations

import tests.support.airflow_env  # noqa: F401 - Airflow's environment, before anything imports airflow

# isort: split
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import PinnedClock
from tests.support.airflow_env import METADATA_DB, MIGRATED_COPY, backup
from tests.support.database import DATABASE_URL, drop_schemas


@pytest.fixture(scope="session")
def database_url() -> str:
    """The test database. Unreachable is a failure, never a skip: the tests would prove nothing."""
    try:
        with psycopg.connect(DATABASE_URL, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {DATABASE_URL}: {exc}. "
            "Run the suite with scripts/test (it finds or starts a database), "
            "or set SYNCLANE_TEST_DATABASE_URL.",
            pytrace=False,
        )
    return DATABASE_URL


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Airflow's metadata database of this process, migrated once (tests/support/airflow_env.py copies a migrated
    one in when there is one); every other Airflow the tests start copies it (``copy_migrated_metadata``)."""
    if METADATA_DB.exists() and METADATA_DB.stat().st_size > 0 and MIGRATED_COPY.exists():
        return
    from airflow.utils.db import initdb

    initdb()
    MIGRATED_COPY.parent.mkdir(parents=True, exist_ok=True)
    partial = MIGRATED_COPY.with_suffix(f".{os.getpid()}.partial")
    backup(METADATA_DB, partial)
    partial.replace(MIGRATED_COPY)  # whole or not at all, even with runs in parallel


@pytest.fixture(scope="session")
def airflow_metadata(database_url: str, tmp_path_factory) -> Iterator[Callable[[str], None]]:
    """Makes PostgreSQL metadata databases for the Airflows the tests start (``airflow standalone``), each a copy
    of one migrated once a session: ``airflow_metadata(name)``. Each caller drops its own; the template is
    dropped at the end."""
    from tests.support.real_airflow import copy_database, migrate_metadata_database

    template = f"synclane_airflow_template_{uuid.uuid4().hex[:8]}"
    migrate_metadata_database(database_url, template, tmp_path_factory.mktemp("airflow-template"))
    try:
        yield lambda name: copy_database(database_url, name, template)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template)))


@pytest.fixture(scope="session")
def run_schema(database_url: str) -> Iterator[str]:
    """A schema of this test run's own, dropped afterwards."""
    name = f"synclane_test_{uuid.uuid4().hex[:10]}"
    yield name
    drop_schemas(database_url, name)


@pytest.fixture
def admin(database_url: str) -> Iterator[psycopg.Connection]:
    """A plain connection for looking at (and tampering with) the table the way an operator would."""
    with psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        yield conn


@pytest.fixture
def schema(run_schema: str, admin: psycopg.Connection) -> str:
    """The run's schema with its tables empty (created on first use by the engine)."""
    admin.execute(
        sql.SQL("DO $$ BEGIN IF to_regclass({}) IS NOT NULL THEN EXECUTE {}; END IF; END $$").format(
            sql.Literal(f'"{run_schema}".lane_budgets'),
            sql.Literal(sql.SQL("TRUNCATE {}.lane_budgets").format(sql.Identifier(run_schema)).as_string(admin)),
        )
    )
    admin.execute(
        sql.SQL("DO $$ BEGIN IF to_regclass({}) IS NOT NULL THEN EXECUTE {}; END IF; END $$").format(
            sql.Literal(f'"{run_schema}".jobs'),
            sql.Literal(
                sql.SQL(
                    "TRUNCATE {0}.jobs, {0}.coverage, {0}.owners, {0}.resync_requests, {0}.marks, {0}.credentials "
                    "RESTART IDENTITY"
                )
                .format(sql.Identifier(run_schema))
                .as_string(admin)
            ),
        )
    )
    return run_schema


@pytest.fixture
def schemas(database_url: str) -> Iterator[Callable[[], str]]:
    """Fresh schema names for one test, all dropped afterwards."""
    made: list[str] = []

    def new() -> str:
        made.append(f"synclane_test_{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield new
    drop_schemas(database_url, *made)


@pytest.fixture
def fresh_schema(schemas: Callable[[], str]) -> str:
    """A schema for one test alone, for tests that change indexes."""
    return schemas()


@pytest.fixture
def clock() -> PinnedClock:
    return PinnedClock(datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc))


LANDING_TABLE = """
CREATE TABLE {schema}.items (
    account text NOT NULL, id integer NOT NULL, updated_at timestamptz NOT NULL, name text, price integer,
    PRIMARY KEY (account, id)
);
CREATE TABLE {schema}.writes (op text NOT NULL, id integer);
CREATE FUNCTION {schema}.count_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.writes VALUES (TG_OP, coalesce(NEW.id, OLD.id));
    RETURN NULL;
END $$;
CREATE TRIGGER count_write AFTER INSERT OR UPDATE OR DELETE ON {schema}.items
    FOR EACH ROW EXECUTE FUNCTION {schema}.count_write();
"""
"""A destination table for landing tests, and a trigger that counts every tuple written to it."""


@pytest.fixture
def landing_schema(schemas: Callable[[], str], admin: psycopg.Connection) -> str:
    """A schema of its own holding ``items``, the landing tests' destination, and ``writes``, what was written."""
    name = schemas()
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    admin.execute(sql.SQL(LANDING_TABLE).format(schema=sql.Identifier(name)).as_string(admin).encode())
    return name


@pytest.fixture
def lane_store(database_url, schema):
    """The budget statements on their own session, as a worker slot runs them."""
    from synclane_provider.core.db.database import Session
    from synclane_provider.core.db.store import Store
    from tests.support.helpers import declare, products

    synclane = declare(schema, products())
    session = Session(synclane.database(database_url))
    yield Store(session)
    session.close()
