"""Fixtures for the Airflow provider tests: a migrated metadata database, the provider's schema, Airflow connections."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from synclane_provider.core.schema import create_schema
from tests.support.airflow_env import PROVIDER_SCHEMA
from tests.support.database import drop_schemas

DECLARATION = "tests.support.provider_declaration:synclane"


@pytest.fixture(scope="session")
def provider_schema_cleanup(database_url: str) -> Iterator[str]:
    yield PROVIDER_SCHEMA
    drop_schemas(database_url, PROVIDER_SCHEMA)


@pytest.fixture
def provider_schema(provider_schema_cleanup: str, admin: psycopg.Connection) -> str:
    """The provider tests' schema with empty tables (the declaration in declaration.py uses it)."""
    from tests.support import provider_declaration as declaration

    create_schema(admin, PROVIDER_SCHEMA)
    admin.execute(
        sql.SQL("TRUNCATE {0}.jobs, {0}.coverage, {0}.owners RESTART IDENTITY").format(sql.Identifier(PROVIDER_SCHEMA))
    )
    declaration.reset()
    return PROVIDER_SCHEMA


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch, database_url: str):
    """Define an Airflow connection for this test (as AIRFLOW_CONN_<ID>), returning its id.

    ``connection(port=1)`` points at a port nothing listens on; extra keyword
    arguments become the connection's extras (e.g. ``application_name``).
    """
    parts = conninfo_to_dict(database_url)

    def define(*, conn_type: str = "synclane", port: int | None = None, password: str | None = None, **extra) -> str:
        conn_id = f"synclane_test_{uuid.uuid4().hex[:8]}"
        fields = {
            "conn_type": conn_type,
            "host": parts.get("host"),
            "port": port if port is not None else int(parts.get("port") or 5432),
            "login": parts.get("user"),
            "password": password if password is not None else parts.get("password"),
            "schema": parts.get("dbname"),
            "extra": extra,
        }
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
        return conn_id

    return define
