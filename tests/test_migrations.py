"""Versioned migrations: numbered files, the recorded version, start-up that reads before it writes, the command.

Adding a column (or anything else) to the schema: write ``synclane_provider/core/db/migrations/NNNN_name.sql``
with the next number, never edit a released one (``RELEASED`` below holds their checksums; add the new
file's when it is released). The catalog comparison here then checks that a table made by every earlier
release upgrades to exactly what a new install gets.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from synclane_provider.core import (
    Database,
    MigrationPrivilegeError,
    Operations,
    SchemaNotReadyError,
    WorkerSlot,
)
from synclane_provider.core.db.schema_versions import (
    SHIPPED,
    VERSION_TABLE,
    ensure_schema,
    load_migrations,
    migration_script,
    read_status,
    required_indexes,
    required_tables,
    shipped_migrations,
)
from tests.support.catalog import differences, snapshot
from tests.support.database import DataRole
from tests.support.helpers import declare, paged, products, rows
from tests.support.released import SCHEMA_0_1_0, install_0_1_0

SUPPORT = Path(__file__).parent / "support"
SHIPPED_VERSIONS = [(m.version, m.name) for m in shipped_migrations()]
LATEST = SHIPPED_VERSIONS[-1][0]
SHIPPED_LABELS = ", ".join(m.label for m in shipped_migrations())
PROBE, PROBE_INDEX = f"{LATEST + 1:04d}_probe", f"{LATEST + 2:04d}_probe_index"
"""Two migrations after the shipped ones, for tests only (``tests/support/migrations``), numbered after them."""

RELEASED = {
    "0001_initial": "c58004e74327975f8b697877b9e59deb04748d0c180eb1ca8b693f165cefaf83",
}
"""sha256 of every released migration file: a released migration is never edited."""


@functools.cache
def probe_directory() -> Path:
    """The test-only migrations, named with the numbers that follow the shipped migrations."""
    directory = Path(tempfile.mkdtemp(prefix="synclane-probe-migrations-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    for label in (PROBE, PROBE_INDEX):
        source = SUPPORT / "migrations" / f"{label.split('_', 1)[1]}.sql"
        (directory / f"{label}.sql").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    return directory


def with_probes():
    return load_migrations(SHIPPED, probe_directory())


@pytest.fixture
def data_role(admin: psycopg.Connection, database_url: str) -> Iterator[DataRole]:
    role = DataRole(admin, database_url)
    yield role
    role.drop()


def migrated(database_url: str, schema: str, migrations=None) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        ensure_schema(conn, schema, migrations=migrations)


def versions(admin: psycopg.Connection, schema: str) -> list[tuple[int, str]]:
    found = admin.execute(
        sql.SQL("SELECT version, name FROM {}.{} ORDER BY version").format(
            sql.Identifier(schema), sql.Identifier(VERSION_TABLE)
        )
    ).fetchall()
    return [(row["version"], row["name"]) for row in found]


def schema_exists(admin: psycopg.Connection, schema: str) -> bool:
    return admin.execute(
        "SELECT to_regnamespace(%s) IS NOT NULL AS found", [sql.Identifier(schema).as_string(admin)]
    ).fetchone()["found"]


# --- the files ------------------------------------------------------------------------------------------------


def test_shipped_migrations_are_numbered_from_one_and_released_ones_are_never_edited():
    migrations = shipped_migrations()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert migrations[0].label == "0001_initial"
    for migration in migrations:
        digest = hashlib.sha256(SHIPPED.joinpath(f"{migration.label}.sql").read_bytes()).hexdigest()
        if migration.label in RELEASED:
            assert digest == RELEASED[migration.label], (
                f"{migration.label} was released and must not change: put the change in a new migration"
            )


def test_the_first_migration_is_the_schema_that_0_1_0_released():
    def statements(text: str) -> list[str]:
        without_comments = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        return [" ".join(part.split()) for part in without_comments.split(";") if part.strip()]

    first = shipped_migrations()[0].render("synclane").replace('"synclane"', "synclane")
    assert statements(first) == statements(SCHEMA_0_1_0.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("files", "complaint"),
    [
        ({"0001_a.sql": "", "0003_c.sql": ""}, "without gaps"),
        ({"0001_a.sql": "", "0002_b.sql": "", "0004_d.sql": "", "0006_f.sql": ""}, "without gaps"),
        ({"0001_a.sql": "", "1_b.sql": ""}, "NNNN_name.sql"),
        ({"0001_a.sql": "", "0002_Add-Column.sql": ""}, "NNNN_name.sql"),
        ({"0001_a.sql": "SELECT '{}'::jsonb"}, "only {schema}"),
    ],
)
def test_misnamed_misnumbered_or_unrenderable_migrations_are_refused(tmp_path, files, complaint):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=complaint.replace("{", r"\{").replace("}", r"\}")):
        load_migrations(tmp_path)


def test_the_objects_start_up_checks_are_the_ones_the_migrations_make(admin, database_url, fresh_schema):
    for migrations in (shipped_migrations(), with_probes()):
        migrated(database_url, fresh_schema, migrations)
        found = snapshot(admin, fresh_schema)
        of_constraints = {c["name"] for c in found["constraints"]}
        indexes = {i["name"] for i in found["indexes"]} - of_constraints
        assert set(required_indexes(migrations)) == indexes
        assert required_tables(migrations) | {VERSION_TABLE} == {t["name"] for t in found["tables"]}


def test_every_rule_on_a_row_is_named_for_what_it_guards(admin, database_url, fresh_schema):
    """A hand-written UPDATE that breaks a rule is told which one, in words (not ``jobs_check1``)."""
    migrated(database_url, fresh_schema)
    names = {c["name"] for c in snapshot(admin, fresh_schema)["constraints"]}
    assert "jobs_running_means_leased" in names
    assert [name for name in names if re.fullmatch(r"\w+_(check|key|excl)\d*", name)] == []

    admin.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, owner, lane, type, mode, dedup_key) VALUES "
            "('shops', 'acme', 'acme', 'orders', 'manual', 'k')"
        ).format(sql.Identifier(fresh_schema))
    )
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_running_means_leased"):
        admin.execute(sql.SQL("UPDATE {}.jobs SET status = 'running'").format(sql.Identifier(fresh_schema)))


# --- upgrading ------------------------------------------------------------------------------------------------


def test_a_table_made_by_0_1_0_upgrades_to_exactly_a_fresh_one(admin, database_url, schemas):
    old, new = schemas(), schemas()
    install_0_1_0(admin, old)
    admin.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, owner, lane, type, mode, dedup_key, cursor) "
            "VALUES ('shops', 'acme', 'acme', 'orders', 'initial', 'initial:x', '50')"
        ).format(sql.Identifier(old))
    )
    assert (
        read_status(admin, old)
        .describe()
        .endswith(f"records no version (made by 0.1.0); this SyncLane needs version {LATEST}: {SHIPPED_LABELS} pending")
    )

    migrated(database_url, old)
    migrated(database_url, new)

    assert differences(snapshot(admin, old), snapshot(admin, new)) == []
    assert versions(admin, old) == versions(admin, new) == [(m.version, m.name) for m in shipped_migrations()]
    [row] = rows(admin, old)
    assert (row["owner"], row["cursor"], row["status"]) == ("acme", "50", "pending")


def test_the_catalog_comparison_sees_a_changed_column_constraint_or_index_predicate(admin, database_url, schemas):
    """The comparison the upgrade test relies on can fail: each kind of change shows up."""
    first, second = schemas(), schemas()
    migrated(database_url, first)
    migrated(database_url, second)
    assert differences(snapshot(admin, first), snapshot(admin, second)) == []
    for change in (
        "ALTER TABLE {s}.jobs ALTER COLUMN priority SET DEFAULT 1",
        "ALTER TABLE {s}.jobs ALTER COLUMN cursor SET NOT NULL",
        "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_attempt_count_not_negative, ADD CHECK (attempt_count >= 1)",
        "DROP INDEX {s}.jobs_waiting_by_time; CREATE INDEX jobs_waiting_by_time ON {s}.jobs (queue, next_run_at)"
        " WHERE status IN ('pending', 'failed')",
    ):
        with admin.transaction():
            admin.execute(sql.SQL(change).format(s=sql.Identifier(second)))
            assert differences(snapshot(admin, first), snapshot(admin, second)) != [], change
            raise psycopg.Rollback()


def test_processes_starting_at_once_apply_each_migration_once(admin, database_url, fresh_schema):
    """Four processes start the engine on a new schema at the same moment, with two migrations after the
    shipped ones that fail when run twice and count their runs."""
    command = [sys.executable, str(SUPPORT / "start_engine.py"), database_url, fresh_schema, str(probe_directory())]
    processes = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    try:
        for process in processes:
            assert process.stdout.readline() == "ready\n", process.communicate()[1]
        for process in processes:  # everyone is waiting on stdin: let them all go
            process.stdin.write("go\n")
            process.stdin.flush()
        results = [process.communicate(timeout=60) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    failures = [(p.returncode, err) for p, (_, err) in zip(processes, results, strict=True) if p.returncode != 0]
    assert failures == []
    assert versions(admin, fresh_schema) == [*SHIPPED_VERSIONS, (LATEST + 1, "probe"), (LATEST + 2, "probe_index")]
    runs = admin.execute(
        sql.SQL("SELECT name, count(*) AS runs FROM {}.probe_runs GROUP BY name ORDER BY 1").format(
            sql.Identifier(fresh_schema)
        )
    ).fetchall()
    assert [(r["name"], r["runs"]) for r in runs] == [("probe", 1), ("probe_index", 1)]
    assert read_status(admin, fresh_schema, with_probes()).ready


def test_a_missing_index_is_re_created_at_start_up(admin, database_url, fresh_schema):
    migrated(database_url, fresh_schema)
    before = snapshot(admin, fresh_schema)
    for name in ("jobs_one_running_per_lane_slot", "jobs_waiting_by_time"):
        admin.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(fresh_schema), sql.Identifier(name)))

    with pytest.raises(
        SchemaNotReadyError, match="lacks the index.es. jobs_one_running_per_lane_slot, jobs_waiting_by_time"
    ):
        Database(database_url, schema=fresh_schema, create_schema=False).connect()
    Database(database_url, schema=fresh_schema).connect().close()

    assert differences(before, snapshot(admin, fresh_schema)) == []


def test_a_schema_a_newer_release_migrated_is_used_as_it_is(admin, database_url, fresh_schema, caplog):
    migrated(database_url, fresh_schema, with_probes())
    admin.execute(sql.SQL("DROP INDEX {}.jobs_waiting_by_time").format(sql.Identifier(fresh_schema)))
    caplog.set_level(logging.WARNING)

    database = Database(
        database_url, schema=fresh_schema
    )  # knows only the shipped ones: the probes are from the future
    database.connect().close()

    assert f"version(s) {LATEST + 1}, {LATEST + 2} that this SyncLane does not know" in caplog.text
    assert (
        read_status(admin, fresh_schema)
        .describe()
        .endswith(f"is at version {LATEST + 2}, newer than this SyncLane knows")
    )
    indexes = {i["name"] for i in snapshot(admin, fresh_schema)["indexes"]}
    assert "jobs_waiting_by_time" not in indexes  # a newer release may have dropped it on purpose


# --- create_schema off ------------------------------------------------------------------------------------------


def test_with_create_schema_off_a_missing_schema_is_named_at_first_use_and_nothing_is_created(
    admin, database_url, fresh_schema
):
    synclane = declare(fresh_schema, products())
    database = Database(database_url, schema=fresh_schema, create_schema=False, application_name=fresh_schema)
    with Operations(synclane, database) as ops, pytest.raises(SchemaNotReadyError) as raised:
        ops.plan("shops")
    message = str(raised.value)
    assert (
        f'schema "{fresh_schema}" has no jobs table; this SyncLane needs version {LATEST}: {SHIPPED_LABELS} pending'
        in message
    )
    assert (
        f"create_schema is off. Apply it with `python -m synclane_provider.core.schema --schema {fresh_schema} apply "
        "--database-url URL` (or $SYNCLANE_DATABASE_URL), or turn create_schema on; "
        f"`python -m synclane_provider.core.schema --schema {fresh_schema} sql --database-url URL` prints the SQL"
        in message
    )
    assert not schema_exists(admin, fresh_schema)
    assert no_connection_left(admin, fresh_schema)


def no_connection_left(admin: psycopg.Connection, application_name: str) -> bool:
    """Whether every connection with this application name has gone (the server notices a close at once,
    but reports it a moment later)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = admin.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        if found.fetchone()["n"] == 0:
            return True
        time.sleep(0.05)
    return False


def test_with_create_schema_off_a_0_1_0_table_or_a_pending_migration_is_named(admin, database_url, schemas):
    old, behind = schemas(), schemas()
    install_0_1_0(admin, old)
    migrated(database_url, behind)

    with pytest.raises(
        SchemaNotReadyError,
        match=r"records no version \(made by 0.1.0\); this SyncLane needs "
        rf"version {LATEST}: {SHIPPED_LABELS} pending, and create_schema is off",
    ):
        Database(database_url, schema=old, create_schema=False).connect()
    with pytest.raises(
        SchemaNotReadyError,
        match=rf"is at version {LATEST}; this SyncLane needs version {LATEST + 2}: "
        rf"{PROBE}, {PROBE_INDEX} pending, and create_schema is off",
    ):
        Database(database_url, schema=behind, create_schema=False, migrations=with_probes()).connect()
    assert versions(admin, behind) == SHIPPED_VERSIONS


# --- a role with data rights only ------------------------------------------------------------------------------


def test_a_role_with_data_rights_only_runs_jobs_with_create_schema_on(
    admin, database_url, fresh_schema, data_role, clock
):
    migrated(database_url, fresh_schema)
    data_role.grant_data_rights(fresh_schema)
    synclane = declare(fresh_schema, products(paged(120)))
    database = synclane.database(data_role.url)
    assert database.create_schema

    with Operations(synclane, database) as ops:
        assert ops.plan("shops", now=clock()).total == 1
    slot = WorkerSlot(synclane, database, "shops", clock=clock)
    try:
        result = slot.run_one(then_continue=False)
    finally:
        slot.close()
    assert (result.outcome.value, result.records) == ("completed", 120)
    [row] = rows(admin, fresh_schema)
    assert row["status"] == "completed" and row["leased_by"] is None


def test_a_role_that_may_not_read_the_version_is_told_what_it_needs(admin, database_url, fresh_schema, data_role):
    migrated(database_url, fresh_schema)  # and no grants at all
    with pytest.raises(MigrationPrivilegeError) as raised:
        Database(data_role.url, schema=fresh_schema).connect()
    assert str(raised.value).startswith(
        f'the role {data_role.name!r} may not read the version of schema "{fresh_schema}": it needs USAGE on the '
        f'schema and SELECT on "{fresh_schema}".schema_migrations (server said: permission denied for schema'
    )


@pytest.mark.parametrize(
    ("change", "migrations", "expected"),
    [
        (
            None,
            with_probes,
            f"needs migration {PROBE}, which the role {{role!r}} may not apply: "
            'it needs ownership of table "{schema}"."jobs" (server said: must be owner of table jobs)',
        ),
        (
            "DELETE FROM {schema}.schema_migrations",
            None,
            "needs migration 0001_initial, which the role {role!r} may not apply: "
            'it needs CREATE on database "{dbname}"',
        ),
        (
            "DROP INDEX {schema}.jobs_waiting_by_time",
            None,
            "lacks the index jobs_waiting_by_time, which the role {role!r} may not re-create: "
            'it needs ownership of table "{schema}"."jobs"',
        ),
    ],
    ids=["a later migration", "the first migration, its row deleted", "a missing index"],
)
def test_what_the_role_may_not_apply_fails_naming_the_migration_and_the_right(
    admin, database_url, fresh_schema, data_role, change, migrations, expected
):
    migrated(database_url, fresh_schema)
    data_role.grant_data_rights(fresh_schema)
    if change is not None:
        admin.execute(sql.SQL(change).format(schema=sql.Identifier(fresh_schema)))
    before = snapshot(admin, fresh_schema), versions(admin, fresh_schema)

    database = Database(data_role.url, schema=fresh_schema, migrations=migrations() if migrations else None)
    with pytest.raises(MigrationPrivilegeError) as raised:
        database.connect()

    message = str(raised.value)
    dbname = conninfo_to_dict(database_url)["dbname"]
    assert (
        f'schema "{fresh_schema}" ' + expected.format(role=data_role.name, schema=fresh_schema, dbname=dbname)
        in message
    )
    assert (
        "Apply it as a role that may (e.g. the schema's owner) with "
        f"`python -m synclane_provider.core.schema --schema {fresh_schema} apply --database-url URL` "
        "(or $SYNCLANE_DATABASE_URL), then start again" in message
    )
    assert (snapshot(admin, fresh_schema), versions(admin, fresh_schema)) == before


# --- the command ------------------------------------------------------------------------------------------------


def command(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "SYNCLANE_DATABASE_URL"}
    if url is not None:
        env["SYNCLANE_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "synclane_provider.core.schema", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_command_prints_every_migration_and_the_printed_sql_makes_the_same_schema(admin, database_url, schemas):
    by_hand, by_engine = schemas(), schemas()
    printed = command("--schema", by_hand)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == migration_script(by_hand) == command("sql", "--schema", by_hand).stdout
    assert f"INSERT INTO \"{by_hand}\".schema_migrations (version, name)\nVALUES (1, 'initial');" in printed.stdout

    admin.execute(printed.stdout.encode())
    migrated(database_url, by_engine)

    assert differences(snapshot(admin, by_hand), snapshot(admin, by_engine)) == []
    assert versions(admin, by_hand) == versions(admin, by_engine)
    again = psycopg.connect(database_url, autocommit=True)
    with again, pytest.raises(psycopg.errors.UniqueViolation):  # a migration run twice changes nothing
        again.execute(printed.stdout.encode())
    assert versions(admin, by_hand) == SHIPPED_VERSIONS


def test_the_command_prints_what_is_pending_applies_it_and_reports(admin, database_url, schemas):
    old = schemas()
    install_0_1_0(admin, old)

    pending = command("sql", "--schema", old, "--database-url", database_url)
    assert pending.returncode == 0, pending.stderr
    assert "-- 0001_initial\nBEGIN;" in pending.stdout and "VALUES (1, 'initial');\nCOMMIT;" in pending.stdout
    assert f'CREATE TABLE IF NOT EXISTS "{old}".schema_migrations' in pending.stdout

    status = command("status", "--schema", old, url=database_url)
    assert status.returncode == 0, status.stderr
    assert "  0001_initial" in status.stdout and status.stdout.rstrip().endswith("pending")

    applied = command("--schema", old, "apply", url=database_url)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == "".join(f"applied {m.label}\n" for m in shipped_migrations()) + (
        f'schema "{old}" is at version {LATEST}, as this SyncLane needs\n'
    )
    assert versions(admin, old) == SHIPPED_VERSIONS

    assert (
        command("apply", "--schema", old, url=database_url).stdout
        == f'schema "{old}" is at version {LATEST}, as this SyncLane needs\n'
    )
    assert "-- nothing to apply" in command("sql", "--schema", old, url=database_url).stdout
    status = command("status", "--schema", old, url=database_url).stdout
    assert "  0001_initial" in status and "applied 20" in status


def test_the_command_needs_a_database_to_apply_and_says_why_it_cannot(database_url, fresh_schema, data_role):
    missing = command("apply", "--schema", fresh_schema)
    assert missing.returncode == 2 and "apply needs --database-url or $SYNCLANE_DATABASE_URL" in missing.stderr
    refused = command("apply", "--schema", fresh_schema, url=data_role.url)
    assert refused.returncode == 1
    assert "needs migration 0001_initial, which the role" in refused.stderr and "CREATE on database" in refused.stderr
