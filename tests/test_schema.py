"""The jobs table: created at start-up, safe to race, in any schema name, and printable as plain SQL.

Versions, upgrades, roles and the command are in test_migrations.py.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from synclane_provider.core import Operations
from synclane_provider.core.db.schema_versions import migration_script, read_status
from synclane_provider.core.schema import create_schema
from tests.support.database import drop_schemas
from tests.support.helpers import declare, products


def indexes(admin, schema):
    found = admin.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", [schema]).fetchall()
    return {row["indexname"]: row["indexdef"] for row in found}


def test_the_two_guarantees_are_unique_indexes(admin, database_url, fresh_schema):
    with psycopg.connect(database_url, autocommit=True) as conn:
        create_schema(conn, fresh_schema)
    found = indexes(admin, fresh_schema)
    assert "CREATE UNIQUE INDEX jobs_planned_once" in found["jobs_planned_once"]
    assert found["jobs_planned_once"].endswith("(queue, owner, type, dedup_key)")
    assert "CREATE UNIQUE INDEX jobs_one_running_per_lane_slot" in found["jobs_one_running_per_lane_slot"]
    assert found["jobs_one_running_per_lane_slot"].endswith("(queue, lane, lane_slot) WHERE (status = 'running'::text)")
    assert "jobs_one_running_per_lane" not in found  # replaced by 0005: width 1 is slot 0 only


def test_creating_the_schema_is_idempotent_and_safe_to_race(admin, database_url, fresh_schema):
    errors = []

    def create():
        try:
            with psycopg.connect(database_url, autocommit=True) as conn:
                create_schema(conn, fresh_schema)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (
        len(indexes(admin, fresh_schema)) == 25
    )  # 15 on jobs; the primary keys of the version table, lane_budgets, coverage, owners, resync_requests,
    # planned_rosters, marks and credentials; owners_paused and owners_in_trouble
    assert read_status(admin, fresh_schema).ready


@pytest.mark.parametrize("name", ["Odd$Name", "synclane_Test_Mixed"])
def test_any_identifier_works_as_schema_name(admin, database_url, name):
    declaration = declare(name, products())
    try:
        with Operations(declaration, declaration.database(database_url)) as ops:
            ops.plan("shops")
            assert len(ops.list_jobs("shops")) == 1
    finally:
        drop_schemas(admin, name)


def test_a_table_created_by_hand_from_the_printed_sql_is_used_as_is(admin, database_url, fresh_schema):
    admin.execute(migration_script(fresh_schema).encode())
    declaration = declare(fresh_schema, products())
    database = declaration.database(database_url)
    database.create_schema = False
    with Operations(declaration, database) as ops:
        ops.plan("shops")
        assert len(ops.list_jobs("shops")) == 1
