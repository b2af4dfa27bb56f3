"""The planner operator: inserts the planned rows once, reports them per type, and finds the declaration by path."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import DeclarationError, UnknownOwnerError, UnknownQueueError
from synclane_provider.locate import locate_queue, locate_synclane
from synclane_provider.operators.plan import SyncLanePlanOperator, retry_bound
from tests.provider.conftest import DECLARATION
from tests.support import provider_declaration as decl
from tests.support.helpers import execute, rows

pytestmark = pytest.mark.airflow


def planner(**kwargs) -> SyncLanePlanOperator:
    return SyncLanePlanOperator(**{"task_id": "plan", "synclane": DECLARATION, "synclane_queue": "shops", **kwargs})


def test_planning_inserts_the_planned_rows_once_and_reports_them_per_type(provider_schema, admin, capsys):
    start = datetime.now(timezone.utc)
    first = planner().execute({})
    total = first["total"]
    assert total in decl.planned_between(start, datetime.now(timezone.utc))
    orders = total - 4
    assert first == {
        "queue": "shops",
        "owners": 4,
        "inserted": {"orders": orders, "products": 4},
        "total": total,
        "pruned": 0,
        "owners_counted": 0,
    }
    assert len(rows(admin, provider_schema)) == total
    log = capsys.readouterr().out
    assert f"queue shops, type orders: {orders} job(s) inserted for 4 owner(s)" in log
    assert "queue shops, type products: 4 job(s) inserted for 4 owner(s)" in log

    again = planner().execute({})  # a retried or doubled run
    assert again["inserted"] == {"orders": 0, "products": 0} and again["total"] == 0
    assert len(rows(admin, provider_schema)) == total


def test_each_run_adds_what_the_owners_jobs_completed_since_the_last_to_their_records(provider_schema, admin):
    planner().execute({})
    execute(
        admin,
        provider_schema,
        "UPDATE {jobs} SET status = 'completed', processed_count = 7,"  # just after the first run's tally
        " completed_at = (SELECT reached FROM {marks} WHERE purpose = 'tallied') + interval '1 ms'"
        " WHERE type = 'products'",
    )
    assert planner().execute({})["owners_counted"] == 4
    assert planner().execute({})["owners_counted"] == 0  # nothing completed since: nothing counted twice
    counted = admin.execute(
        sql.SQL("SELECT owner, records FROM {}.owners ORDER BY owner").format(sql.Identifier(provider_schema))
    ).fetchall()
    assert [r["records"] for r in counted] == [7, 7, 7, 7]


def test_planning_prunes_a_queue_with_a_retention_after_planning_it(provider_schema, admin, capsys):
    execute(
        admin,
        provider_schema,
        "INSERT INTO {jobs} (queue, owner, lane, type, mode, status, dedup_key, created_at, completed_at) "
        "VALUES ('slow', 'hooli', 'hooli', 'export', 'manual', 'completed', 'manual:old', now() - interval '41 days', "
        "        now() - interval '40 days'), "
        "       ('slow', 'hooli', 'hooli', 'export', 'manual', 'completed', 'manual:new', now(), now())",
    )
    result = planner(synclane_queue="slow").execute({})
    assert (result["total"], result["pruned"]) == (1, 1)
    assert "queue slow: 1 finished job(s) older than 30 days pruned" in capsys.readouterr().out
    assert sorted(r["dedup_key"] for r in rows(admin, provider_schema)) == ["initial", "manual:new"]
    assert planner().execute({})["pruned"] == 0  # a queue without retention keeps everything


def test_planning_one_owner(provider_schema, admin):
    start = datetime.now(timezone.utc)
    planned = planner(owner_id="globex").execute({})["total"]
    assert planned in {decl.orders_per_owner(at) + 1 for at in (start, datetime.now(timezone.utc))}
    assert {row["owner"] for row in rows(admin, provider_schema)} == {"globex"}
    with pytest.raises(UnknownOwnerError, match="'umbrella'"):
        planner(owner_id="umbrella").execute({})


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.support.provider_declaration", "must be an import path like 'package.module:attribute'"),
        ("tests.provider.nowhere:synclane", "cannot import module 'tests.provider.nowhere'"),
        (
            "tests.support.provider_declaration:missing",
            "module 'tests.support.provider_declaration' has no attribute 'missing'",
        ),
        ("tests.support.provider_declaration:shops", "names a function, expected a SyncLane declaration"),
        (":synclane", "must be an import path"),
    ],
)
def test_a_bad_declaration_path_is_a_clear_error_naming_it(path, message):
    with pytest.raises(DeclarationError, match=message) as error:
        locate_synclane(path)
    assert repr(path) in str(error.value)


def test_an_unknown_queue_names_the_declared_ones_and_the_path():
    with pytest.raises(UnknownQueueError, match=r"unknown queue 'shop' \(declared: 'shops', 'slow'\)") as error:
        locate_queue(DECLARATION, "shop")
    assert DECLARATION in str(error.value)


def test_the_operator_reports_a_bad_path_when_it_runs(provider_schema):
    with pytest.raises(UnknownQueueError, match="'orders'"):
        planner(synclane_queue="orders").execute({})


def test_planning_waits_out_a_database_that_is_out_of_connections(provider_schema, admin, caplog):
    decl.OWNER_SOURCE_FAILURES[:] = [
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.OperationalError("connection to server failed: Connection refused"),
    ]
    try:
        start = datetime.now(timezone.utc)
        assert planner().execute({})["total"] in decl.planned_between(start, datetime.now(timezone.utc))
    finally:
        left = list(decl.OWNER_SOURCE_FAILURES)
        decl.OWNER_SOURCE_FAILURES.clear()
    assert left == []
    assert sum("planning queue shops failed" in r.getMessage() for r in caplog.records) == 2


def test_planning_gives_up_within_its_plan_interval_and_at_once_on_a_real_error(provider_schema):
    assert retry_bound(decl.synclane) == timedelta(seconds=48)  # a one-minute plan interval
    decl.OWNER_SOURCE_FAILURES[:] = [ValueError("the owner source has a bug")]
    try:
        with pytest.raises(ValueError, match="the owner source has a bug"):
            planner().execute({})
    finally:
        decl.OWNER_SOURCE_FAILURES.clear()
