"""Creates the jobs table, or renders its SQL for teams that run their own migrations.

``python -m synclane_provider.core.schema [--schema NAME]`` prints the SQL.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources

import psycopg
from psycopg import sql

DEFAULT_SCHEMA = "synclane"
_QUALIFIED = re.compile(r"\bsynclane(?=\.jobs\b|;|\s*$)", re.MULTILINE)


def schema_sql_text() -> str:
    """The shipped ``schema.sql``, written for the default schema ``synclane``."""
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def render_schema(schema: str, conn: psycopg.Connection | None = None) -> str:
    """``schema.sql`` with every reference to the default schema replaced by ``schema``, safely quoted."""
    quoted = sql.Identifier(schema).as_string(conn)
    return _QUALIFIED.sub(lambda _: quoted, schema_sql_text())


def create_schema(conn: psycopg.Connection, schema: str) -> None:
    """Create the schema, table and indexes if they are missing, in one transaction.

    A transaction-level advisory lock serialises concurrent start-ups, which
    would otherwise race on ``CREATE ... IF NOT EXISTS`` in the catalogue.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('synclane.create_schema'))")
        conn.execute(render_schema(schema, conn).encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the SQL that creates SyncLane's jobs table.")
    parser.add_argument("--schema", default=DEFAULT_SCHEMA, help="schema name (default: %(default)s)")
    args = parser.parse_args(argv)
    print(render_schema(args.schema), end="")


if __name__ == "__main__":
    main()
