"""The jobs table's schema versions: the numbered migrations, what the database records, and applying them.

The schema is the migrations ``migrations/NNNN_name.sql`` applied in order: ``0001_initial`` is the table
as 0.1.0 released it, and every later change is a new file with the next number (a released file is never
edited; a test holds their checksums). Each file is written for ``{schema}``, which psycopg fills with the
quoted schema name (so a literal brace is written ``{{``). The database records what it has had in
``<schema>.schema_migrations``, one row per migration, written in the migration's own transaction. A table
made by 0.1.0 has no such table: to SyncLane it is at version 0, and ``0001_initial``, being idempotent,
upgrades it by recording itself.

At start-up (:class:`~synclane_provider.core.db.database.Database`, on its first connection) :func:`ensure_schema`
reads the version and the indexes with plain SELECTs, so a role with data rights only starts against an
up-to-date schema. Only when something is pending does it lock the schema (a transaction-level advisory
lock) and apply each pending migration in a transaction of its own, reading the version again under the
lock, so that processes starting together apply each migration once. A missing index (dropped by hand) is
re-created the same way. With ``create_schema`` off, or when the role lacks a right that a pending
migration needs, it raises an error naming the migration, the right, and the command in
:mod:`synclane_provider.core.db.schema` that applies it as another role.
"""

from __future__ import annotations

import functools
import logging
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.rows import dict_row

from synclane_provider.core.db.queries import statement
from synclane_provider.core.errors import MigrationPrivilegeError, SchemaNotReadyError

log = logging.getLogger(__name__)

DEFAULT_SCHEMA = "synclane"
SHIPPED: Traversable = resources.files(__package__).joinpath("migrations")
"""The migrations this release ships."""
VERSION_TABLE = "schema_migrations"
STATEMENTS = "schema_versions.sql"
COMMAND = "python -m synclane_provider.core.schema"
"""The command that prints, applies and reports migrations (see schema.py)."""
DATABASE_URL_VARIABLE = "SYNCLANE_DATABASE_URL"

_FILE_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.sql$")
_COMMENT = re.compile(r"--[^\n]*")
_CREATE_TABLE = re.compile(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\{schema\}\.(?P<name>\w+)", re.I)
_DROP_TABLE = re.compile(r"\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?\{schema\}\.(?P<name>\w+)", re.I)
_CREATE_INDEX = re.compile(
    r"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(?P<concurrently>CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>\w+)"
    r"\s+ON\b[^;]*",
    re.I,
)
_DROP_INDEX = re.compile(
    r"\bDROP\s+INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+EXISTS\s+)?(?:\{schema\}\.)?(?P<name>\w+)", re.I
)


@dataclass(frozen=True)
class Migration:
    """One numbered file of ``migrations/``: its version (the number), its name, and its SQL with ``{schema}``."""

    version: int
    name: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    def render(self, schema: str) -> str:
        """The SQL for ``schema``, its name quoted by psycopg."""
        return sql.SQL(self.text).format(schema=sql.Identifier(schema)).as_string(None)

    def tables(self) -> tuple[list[str], list[str]]:
        """The tables this migration creates and drops, by name."""
        text = _COMMENT.sub("", self.text)
        return [m["name"] for m in _CREATE_TABLE.finditer(text)], [m["name"] for m in _DROP_TABLE.finditer(text)]

    def indexes(self) -> list[tuple[str, str | None]]:
        """The indexes this migration creates (name, statement) and drops (name, None), in the file's order."""
        text = _COMMENT.sub("", self.text)
        found: list[tuple[int, str, str | None]] = [
            (m.start(), m["name"], _without_concurrently(m)) for m in _CREATE_INDEX.finditer(text)
        ]
        found += [(m.start(), m["name"], None) for m in _DROP_INDEX.finditer(text)]
        return [(name, created) for _, name, created in sorted(found)]


def _without_concurrently(match: re.Match[str]) -> str:
    """An index statement fit for a transaction (a re-created index is built inside one)."""
    text = match.group(0)
    if match["concurrently"]:
        start, end = match.span("concurrently")
        text = text[: start - match.start()] + text[end - match.start() :]
    return text


def load_migrations(*directories: Traversable | Path) -> tuple[Migration, ...]:
    """The migrations in ``directories`` (default: the shipped ones), in order.

    Every file must be named ``NNNN_name.sql`` (four digits, lower-case words joined by ``_``), and the
    numbers must run 1, 2, 3 … without a gap or a repeat: a migration added on two branches at once is
    caught here, not in a database.
    """
    found: list[Migration] = []
    for directory in directories or (SHIPPED,):
        for entry in directory.iterdir():
            if entry.name.startswith((".", "__")):
                continue
            match = _FILE_NAME.match(entry.name)
            if match is None:
                raise ValueError(f"migration file {entry.name!r} is not named NNNN_name.sql (e.g. 0002_add_notes.sql)")
            found.append(Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, 3 … without gaps or repeats, got {versions}")
    for migration in found:
        try:
            migration.render(DEFAULT_SCHEMA)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"migration {migration.label}: only {{schema}} may stand in braces ({exc!r})") from None
    return tuple(found)


@functools.cache
def shipped_migrations() -> tuple[Migration, ...]:
    return load_migrations(SHIPPED)


def required_tables(migrations: Iterable[Migration]) -> set[str]:
    """The tables that ``migrations``, applied in order, leave in the schema (besides the version table)."""
    tables: set[str] = set()
    for migration in migrations:
        created, dropped = migration.tables()
        tables = (tables | set(created)) - set(dropped)
    return tables


def required_indexes(migrations: Iterable[Migration]) -> dict[str, str]:
    """The indexes that ``migrations``, applied in order, leave in the schema, each with the statement that
    creates it (with ``{schema}``). What start-up checks and re-creates when one is missing."""
    indexes: dict[str, str] = {}
    for migration in migrations:
        for name, created in migration.indexes():
            if created is None:
                indexes.pop(name, None)
            else:
                indexes[name] = created
    return indexes


@dataclass(frozen=True)
class AppliedMigration:
    version: int
    name: str
    applied_at: datetime


@dataclass(frozen=True)
class SchemaStatus:
    """What one schema has, against the migrations this release knows: read with SELECTs only."""

    schema: str
    applied: tuple[AppliedMigration, ...]
    pending: tuple[Migration, ...]
    missing_tables: tuple[str, ...]
    missing_indexes: tuple[str, ...]
    newer: tuple[int, ...]
    """Applied versions this release does not know: a newer release migrated the schema (its indexes are
    then left as they are)."""
    version_table: bool
    jobs_table: bool
    database: str = ""
    """Where it was read: the database's name, host and port (``"jobs" on 10.0.0.5:5432``)."""

    @property
    def version(self) -> int:
        """The highest version applied; 0 for a new schema or a table made by 0.1.0."""
        return max((a.version for a in self.applied), default=0)

    @property
    def ready(self) -> bool:
        return not (self.pending or self.missing_tables or self.missing_indexes)

    def describe(self) -> str:
        """One sentence on what the schema lacks (or that it has everything)."""
        quoted = _quoted(self.schema)
        if self.missing_tables and not self.pending:
            return (
                f"schema {quoted} records version {self.version} but lacks its table(s) "
                f"{', '.join(self.missing_tables)}; restore them, or drop the schema to start afresh"
            )
        parts = []
        if self.pending:
            if not self.version_table and self.jobs_table:
                where = f"schema {quoted} holds a jobs table that records no version (made by 0.1.0)"
            elif not self.version_table:
                where = f"schema {quoted} has no jobs table"
            else:
                where = f"schema {quoted} is at version {self.version}"
            labels = ", ".join(m.label for m in self.pending)
            parts.append(f"{where}; this SyncLane needs version {self.pending[-1].version}: {labels} pending")
        if self.missing_indexes:
            parts.append(f"schema {quoted} lacks the index(es) {', '.join(self.missing_indexes)}")
        if parts:
            return "; ".join(parts)
        if self.newer:
            return f"schema {quoted} is at version {self.version}, newer than this SyncLane knows"
        return f"schema {quoted} is at version {self.version}, as this SyncLane needs"


def _quoted(schema: str) -> str:
    return sql.Identifier(schema).as_string(None)


def _run(conn: psycopg.Connection, name: str, schema: str, /, **params: Any) -> list[dict[str, Any]]:
    """Run a statement of ``schema_versions.sql`` on any connection, whatever its cursor and row settings."""
    query = statement(name, schema, STATEMENTS)
    cursor = psycopg.RawCursor(conn, row_factory=dict_row)
    with cursor:
        cursor.execute(query.text, query.arguments(params), prepare=False)
        return cursor.fetchall() if cursor.description else []


def read_status(conn: psycopg.Connection, schema: str, migrations: Sequence[Migration] | None = None) -> SchemaStatus:
    """The schema's applied and pending migrations and missing indexes, with SELECTs only."""
    known = tuple(migrations) if migrations is not None else shipped_migrations()
    objects = _run(conn, "schema_objects", schema, schema_name=schema)
    tables = {row["name"] for row in objects if row["kind"] == "table"}
    indexes = {row["name"] for row in objects if row["kind"] == "index"}
    applied: tuple[AppliedMigration, ...] = ()
    if VERSION_TABLE in tables:
        try:
            applied = tuple(AppliedMigration(**row) for row in _run(conn, "applied_migrations", schema))
        except errors.InsufficientPrivilege as exc:
            raise MigrationPrivilegeError(
                f"the role {conn.info.user!r} may not read the version of schema {_quoted(schema)}: it needs USAGE "
                f"on the schema and SELECT on {_quoted(schema)}.{VERSION_TABLE} (server said: "
                f"{exc.diag.message_primary})"
            ) from exc
    versions = {a.version for a in applied}
    done = [m for m in known if m.version in versions]
    newer = tuple(sorted(versions - {m.version for m in known}))
    missing_indexes: tuple[str, ...] = ()
    if not newer:
        missing_indexes = tuple(sorted(set(required_indexes(done)) - indexes))
    return SchemaStatus(
        schema=schema,
        applied=applied,
        pending=tuple(m for m in known if m.version not in versions),
        missing_tables=tuple(sorted(required_tables(done) - tables)),
        missing_indexes=missing_indexes,
        newer=newer,
        version_table=VERSION_TABLE in tables,
        jobs_table="jobs" in tables,
        database=f"{_quoted(conn.info.dbname)} on {conn.info.host}:{conn.info.port}",
    )


def ensure_schema(
    conn: psycopg.Connection, schema: str, *, create: bool = True, migrations: Sequence[Migration] | None = None
) -> SchemaStatus:
    """What start-up does: read the version; when something is pending, apply it (``create``) or say so.

    Raises :class:`SchemaNotReadyError` when the schema lacks something and ``create`` is off, and
    :class:`MigrationPrivilegeError` when the role may not apply it.
    """
    status = read_status(conn, schema, migrations)
    if status.newer:
        log.warning(
            "schema %s has version(s) %s that this SyncLane does not know (a newer release applied them); "
            "using it as it is",
            _quoted(schema),
            ", ".join(map(str, status.newer)),
        )
    if status.ready:
        return status
    if status.missing_tables and not status.pending:
        raise SchemaNotReadyError(status.describe(), status)
    if not create:
        raise SchemaNotReadyError(
            f"{status.describe()}, and create_schema is off. Apply it with {_command(schema, 'apply')} (or "
            f"${DATABASE_URL_VARIABLE}), or turn create_schema on; {_command(schema, 'sql')} prints the SQL for your "
            f"own migration tool.",
            status,
        )
    migrate(conn, schema, migrations)
    return read_status(conn, schema, migrations)


def create_schema(conn: psycopg.Connection, schema: str) -> None:
    """Bring ``schema`` to this release's version (what start-up does with ``create_schema`` on)."""
    ensure_schema(conn, schema, create=True)


def migrate(conn: psycopg.Connection, schema: str, migrations: Sequence[Migration] | None = None) -> list[Migration]:
    """Apply the pending migrations in order, each in its own transaction with its version row, under the
    schema's advisory lock, reading the version again under the lock (a migration another process applied
    meanwhile is skipped); then re-create missing indexes the same way. Returns what this call applied.

    ``conn`` must be in autocommit mode: each migration commits on its own.
    """
    if not conn.autocommit:
        raise ValueError("migrate() needs an autocommit connection: each migration commits on its own")
    known = tuple(migrations) if migrations is not None else shipped_migrations()
    applied = []
    for migration in read_status(conn, schema, known).pending:
        with conn.transaction():
            status = _lock(conn, schema, known)
            if migration not in status.pending:
                continue
            try:
                _execute(conn, migration.render(schema))
                if not status.version_table:
                    _run(conn, "create_version_table", schema)
                _run(conn, "record_migration", schema, version=migration.version, name=migration.name)
            except errors.InsufficientPrivilege as exc:
                raise MigrationPrivilegeError(
                    _refusal(conn, schema, f"needs migration {migration.label}, which", "apply", exc)
                ) from exc
        log.info("schema %s: applied migration %s", _quoted(schema), migration.label)
        applied.append(migration)
    if not read_status(conn, schema, known).missing_indexes:
        return applied
    with conn.transaction():
        status = _lock(conn, schema, known)
        statements = required_indexes(m for m in known if m not in status.pending)
        for name in status.missing_indexes:
            try:
                _execute(conn, sql.SQL(statements[name]).format(schema=sql.Identifier(schema)).as_string(None))
            except errors.InsufficientPrivilege as exc:
                raise MigrationPrivilegeError(
                    _refusal(conn, schema, f"lacks the index {name}, which", "re-create", exc)
                ) from exc
            log.warning("schema %s: re-created the missing index %s", _quoted(schema), name)
    return applied


def _lock(conn: psycopg.Connection, schema: str, migrations: Sequence[Migration]) -> SchemaStatus:
    """Take the schema's migration lock for this transaction and read the version again under it."""
    _execute(conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")  # each read sees what the lock waited for
    _run(conn, "lock_schema", schema, schema_name=schema)
    return read_status(conn, schema, migrations)


def _execute(conn: psycopg.Connection, text: str) -> None:
    with psycopg.Cursor(conn) as cursor:
        cursor.execute(text.encode(), prepare=False)


_RIGHTS = (
    (re.compile(r"permission denied for database (?P<object>.+)"), "CREATE on database {object}"),
    (re.compile(r"permission denied for schema (?P<object>.+)"), "CREATE on schema {object}"),
    (re.compile(r"must be owner of (?P<kind>\w+) (?P<object>.+)"), "ownership of {kind} {schema}.{object}"),
    (re.compile(r"permission denied for (?P<kind>\w+) (?P<object>.+)"), "a privilege on {kind} {object}"),
)


def _refusal(conn: psycopg.Connection, schema: str, what: str, action: str, exc: psycopg.Error) -> str:
    """Why a role may not bring the schema up to date, the right it lacks, and how to do it as another role."""
    said = exc.diag.message_primary or str(exc)
    right = "a right it lacks"
    for pattern, template in _RIGHTS:
        match = pattern.fullmatch(said)
        if match:
            parts = {key: _quoted(value) if key == "object" else value for key, value in match.groupdict().items()}
            right = template.format(schema=_quoted(schema), **parts)
            break
    return (
        f"schema {_quoted(schema)} {what} the role {conn.info.user!r} may not {action}: it needs {right} "
        f"(server said: {said}). Apply it as a role that may (e.g. the schema's owner) with "
        f"{_command(schema, 'apply')} (or ${DATABASE_URL_VARIABLE}), then start again; {_command(schema, 'sql')} "
        f"prints the SQL for your own migration tool."
    )


def _command(schema: str, action: str) -> str:
    """The command line that does ``action`` (apply, sql) for ``schema``."""
    schema_option = "" if schema == DEFAULT_SCHEMA else f" --schema {shlex.quote(schema)}"
    return f"`{COMMAND}{schema_option} {action} --database-url URL`"


def migration_script(
    schema: str, migrations: Sequence[Migration] | None = None, status: SchemaStatus | None = None
) -> str:
    """The SQL that brings ``schema`` up to date: what :func:`migrate` runs, for review or another tool.

    Without ``status`` it is every migration (a new database); each is one transaction that also records
    its version, so running a migration twice fails and changes nothing.
    """
    known = tuple(migrations) if migrations is not None else shipped_migrations()
    pending = status.pending if status is not None else known
    version_table = status.version_table if status is not None else False
    quoted = _quoted(schema)
    parts = [f"-- SyncLane schema {quoted}: " + (status.describe() if status else "every migration, for a new schema")]
    for migration in pending:
        body = migration.render(schema).strip()
        if not body.endswith(";"):
            body += ";"
        steps = [f"-- {migration.label}", "BEGIN;", "", body, ""]
        if not version_table:
            steps.append(_script_statement("create_version_table", schema) + ";")
            version_table = True
        steps.append(_script_statement("record_migration", schema, migration.version, migration.name) + ";")
        steps.append("COMMIT;")
        parts.append("\n".join(steps))
    if status is not None and status.missing_indexes:
        statements = required_indexes(m for m in known if m not in pending)
        creates = [
            sql.SQL(statements[name]).format(schema=sql.Identifier(schema)).as_string(None) + ";"
            for name in status.missing_indexes
        ]
        parts.append("\n".join(["-- missing indexes", "BEGIN;", *creates, "COMMIT;"]))
    if len(parts) == 1:
        parts.append("-- nothing to apply")
    return "\n\n".join(parts) + "\n"


def _script_statement(name: str, schema: str, *values: object) -> str:
    """A statement of ``schema_versions.sql`` with its values written in, for a script (it runs with parameters)."""
    query = statement(name, schema, STATEMENTS)
    return re.sub(rb"\$(\d+)", lambda m: sql.Literal(values[int(m[1]) - 1]).as_bytes(None), query.text).decode()
