"""The test database: where it is, and dropping the schemas a test made in it.

One definition of the address (the local server's lives in ``tools/postgres.py``, which the test command
also uses to find a database), and one way to drop what a test created, used by every fixture that makes a
schema of its own.
"""

from __future__ import annotations

import os

import psycopg
from psycopg import sql

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
