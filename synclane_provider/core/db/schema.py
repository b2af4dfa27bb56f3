"""The command for the jobs table's schema: print the SQL of its migrations, apply them, or report them.

For teams that run migrations themselves (``create_schema=False``) and for applying a migration as a role
that may, when the workers' role has data rights only::

    python -m synclane_provider.core.schema [--schema NAME] sql      # what is pending (everything for a new schema)
    python -m synclane_provider.core.schema [--schema NAME] apply    # apply it, as SyncLane does at start-up
    python -m synclane_provider.core.schema [--schema NAME] status   # each migration, applied or pending
    python -m synclane_provider.core.schema [--schema NAME]          # every migration, without a database

The database comes from ``--database-url`` or ``$SYNCLANE_DATABASE_URL``. This module only parses
arguments and prints: the work is done by :mod:`synclane_provider.core.db.schema_versions`, which other front
ends call the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import psycopg

from synclane_provider.core.db.schema_versions import (
    COMMAND,
    DATABASE_URL_VARIABLE,
    DEFAULT_SCHEMA,
    Migration,
    SchemaStatus,
    create_schema,
    migrate,
    migration_script,
    read_status,
    shipped_migrations,
)
from synclane_provider.core.errors import SchemaNotReadyError

__all__ = ["create_schema", "describe_status", "main"]


def describe_status(status: SchemaStatus, migrations: Sequence[Migration] | None = None) -> str:
    """The ``status`` report: what the schema lacks, then each migration, applied (when) or pending."""
    known = tuple(migrations) if migrations is not None else shipped_migrations()
    applied = {a.version: a for a in status.applied}
    lines = [status.describe()]
    for migration in known:
        done = applied.get(migration.version)
        lines.append(f"  {migration.label:<40} {'applied ' + done.applied_at.isoformat() if done else 'pending'}")
    for version in status.newer:
        lines.append(f"  {version:04d}_{applied[version].name:<35} applied by a newer release")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="SyncLane's jobs table: print, apply or report its migrations."
    )
    _common_options(parser, top=True)
    commands = parser.add_subparsers(dest="command")
    sql_command = commands.add_parser(
        "sql", help="print the SQL of the pending migrations (of all, without a database)"
    )
    sql_command.add_argument("--all", action="store_true", help="every migration, without connecting")
    commands.add_parser("apply", help="apply the pending migrations and re-create missing indexes")
    commands.add_parser("status", help="list the migrations, applied or pending")
    for command in commands.choices.values():
        _common_options(command, top=False)
    args = parser.parse_args(argv)
    url = args.database_url or os.environ.get(DATABASE_URL_VARIABLE)
    if args.command is None or (args.command == "sql" and (args.all or not url)):
        print(migration_script(args.schema), end="")
        return 0
    if not url:
        parser.error(f"{args.command} needs --database-url or ${DATABASE_URL_VARIABLE}")
    try:
        with psycopg.connect(url, autocommit=True, application_name="synclane-schema") as conn:
            if args.command == "sql":
                print(migration_script(args.schema, status=read_status(conn, args.schema)), end="")
            elif args.command == "status":
                print(describe_status(read_status(conn, args.schema)))
            else:
                for migration in migrate(conn, args.schema):
                    print(f"applied {migration.label}")
                print(read_status(conn, args.schema).describe())
    except (SchemaNotReadyError, psycopg.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--schema`` and ``--database-url``, before or after the command. Their defaults are set on the top
    parser only: a command's own default would overwrite a value given before it."""
    parser.add_argument(
        "--schema",
        default=DEFAULT_SCHEMA if top else argparse.SUPPRESS,
        help=f"schema name (default: {DEFAULT_SCHEMA})",
    )
    parser.add_argument(
        "--database-url",
        default=None if top else argparse.SUPPRESS,
        help=f"the database, a libpq URL or conninfo (default: ${DATABASE_URL_VARIABLE})",
    )


if __name__ == "__main__":
    sys.exit(main())
