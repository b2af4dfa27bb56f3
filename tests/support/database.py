"""The test database: where it is, dropping the schemas a test made in it, and login roles with few rights.

One definition of the address (the local server's lives in ``tools/postgres.py``, which the test command
also uses to find a database), and one way to drop what a test created, used by every fixture that makes a
schema of its own.
"""

from __future__ import annotations

import os
import uuid

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tools.postgres import LOCAL_URL

DATABASE_URL = os.environ.get("SYNCLANE_TEST_DATABASE_URL", LOCAL_URL)


def drop_schemas(target: str | psycopg.Connection, *names: str) -> None:
    """Drop the schemas with everything in them; ``target`` is a URL or an open autocommit connection."""
    if isinstance(target, str):
        with psycopg.connect(target, autocommit=True) as conn:
            drop_schemas(conn, *names)
        return
    for name in names:
        target.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


class DataRole:
    """A login role with no rights until it is given data rights on a schema's tables, as production workers have."""

    def __init__(self, admin: psycopg.Connection, database_url: str) -> None:
        self.admin = admin
        self.name = f"synclane_data_{uuid.uuid4().hex[:10]}"
        self.url = make_conninfo(database_url, user=self.name)
        parts = conninfo_to_dict(self.url)
        self.uri = f"postgresql://{self.name}@{parts.get('host', '')}:{parts.get('port', 5432)}/{parts['dbname']}"
        """The same as a URI, the form an Airflow connection in an environment variable takes."""
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(self.name)))

    def grant_data_rights(self, schema: str) -> None:
        for statement in (
            "GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
            "GRANT USAGE ON SEQUENCE {schema}.jobs_id_seq TO {role}",
        ):
            self.admin.execute(sql.SQL(statement).format(schema=sql.Identifier(schema), role=sql.Identifier(self.name)))

    def drop(self) -> None:
        role = sql.Identifier(self.name)
        self.admin.execute(sql.SQL("DROP OWNED BY {}").format(role))  # its privileges (and anything it owns) here
        self.admin.execute(sql.SQL("DROP ROLE {}").format(role))
