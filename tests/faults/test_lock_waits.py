"""Long transactions holding job rows, and statements the server times out or refuses.

An operator's ``SELECT … FOR UPDATE`` left open in psql must not stall the lanes it does not touch: takes
skip locked rows instead of waiting on them. A worker whose own row is held waits for it (and only it); a
``lock_timeout`` or ``statement_timeout`` on the way is a passing error, retried on the same connection.
A statement the server refuses for what it is fails at once, not after minutes of retries.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import Database, Job, Operations, Owner, Page, Session, WorkerPool, WorkerSlot
from synclane_provider.core.db.store import Store
from synclane_provider.core.plan import planner
from synclane_provider.core.run.runner import Outcome
from tests.support.fault_tools import PATIENCE, PageLog, application_name, wait_for, waiting_on_a_lock
from tests.support.helpers import declare, execute, owners, paged, products, rows

LANES = owners(*[Owner(f"{lane}-{n}", lane=lane) for lane in ("a", "b", "c") for n in (1, 2)])


@pytest.fixture
def locker(database_url):
    """An operator's session in psql: its transaction stays open until the test ends it."""
    with psycopg.connect(database_url, row_factory=psycopg.rows.dict_row) as conn:
        yield conn
        conn.rollback()


def lock(conn: psycopg.Connection, schema: str, where: str, params=()) -> list[int]:
    query = sql.SQL("SELECT id FROM {}.jobs WHERE " + where + " ORDER BY id FOR UPDATE").format(sql.Identifier(schema))
    return [row["id"] for row in conn.execute(query, list(params)).fetchall()]


def bounded(call, what: str):
    """Run ``call`` on a thread and return its result; a call that waits on a lock would never return."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PATIENCE)
    assert not thread.is_alive(), f"{what} is stuck (waiting on a lock?)"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_takes_pass_over_a_lane_whose_head_another_transaction_holds_and_every_other_lane_runs(
    schema, database_url, admin, locker
):
    declaration = declare(schema, products(paged(100, 50)), owner_source=LANES)
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    [held] = lock(locker, schema, "owner = 'a-1'")

    slot = WorkerSlot(declaration, database, "shops")
    try:
        summary = bounded(slot.drain, "draining while a job row is locked")
    finally:
        slot.close()

    # Lane a's head is held: the lane is passed over whole (its next job never goes before its head), the other
    # lanes run.
    assert summary.outcomes == {"completed": 4}
    assert {(r["owner"], r["status"]) for r in rows(admin, schema)} == {
        ("a-1", "pending"),
        ("a-2", "pending"),
        ("b-1", "completed"),
        ("b-2", "completed"),
        ("c-1", "completed"),
        ("c-2", "completed"),
    }
    locker.rollback()
    slot = WorkerSlot(declaration, database, "shops")
    assert slot.run_one().job.id == held
    assert slot.run_one().job.owner == "a-2"
    slot.close()


def test_an_expired_lease_held_by_another_transaction_is_not_waited_for(schema, database_url, admin, locker, clock):
    declaration = declare(schema, products(paged(100, 50)), owner_source=LANES)
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops", now=clock.now)
    dead = WorkerSlot(declaration, database, "shops", clock=clock)
    stranded = dead.take()  # its worker dies here
    clock.advance(timedelta(minutes=10))
    lock(locker, schema, "id = %s", [stranded.id])

    slot = WorkerSlot(declaration, database, "shops", clock=clock)
    try:
        summary = bounded(slot.drain, "draining while an expired job row is locked")
    finally:
        slot.close()
        dead.close()

    assert summary.outcomes == {"completed": 4}  # the other lanes; the stranded job's lane is still running
    [row] = rows(admin, schema, "id = %s", [stranded.id])
    assert (row["status"], row["leased_by"]) == ("running", stranded.leased_by)


@pytest.mark.parametrize("timeout", [None, "lock_timeout", "statement_timeout"])
def test_a_worker_whose_own_row_is_held_waits_for_it_alone_while_other_lanes_run(
    schema, database_url, admin, locker, caplog, timeout
):
    """An operator holds lane a's running job mid-page. The slot running it waits (retrying on the same
    connection if a timeout ends the wait); the other slot runs every other lane meanwhile."""
    name = application_name("held")
    options = f"-c {timeout}=100ms" if timeout else ""
    database = Database(
        connect=lambda: psycopg.connect(database_url, application_name=name, options=options), schema=schema
    )
    locked = threading.Event()

    def handler(job: Job) -> Page:
        if job.owner == "a-1" and job.cursor == "50" and not locked.is_set():
            lock(locker, schema, "id = %s", [job.id])
            locked.set()
        return paged(100, 50)(job)

    log = PageLog(handler)
    declaration = declare(schema, products(log), owner_source=LANES)
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops")
    pool = WorkerPool(declaration, database, "shops", slots=2)
    caplog.set_level(logging.WARNING, logger="synclane_provider.core.db.database")
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("summary", pool.drain()))
    thread.start()
    try:
        assert locked.wait(PATIENCE)

        def everything_else_done():
            return {r["owner"] for r in rows(admin, schema, "status = 'completed'")} == {"b-1", "b-2", "c-1", "c-2"}

        wait_for(everything_else_done, "the other lanes to finish while lane a's row is held")
        [held] = rows(admin, schema, "owner = 'a-1'")
        assert (held["status"], held["cursor"]) == ("running", "50")
        if timeout is None:
            wait_for(lambda: waiting_on_a_lock(admin, name), "the held page's cursor save to wait on the row lock")
        else:
            wait_for(
                lambda: sum("database error during" in r.getMessage() for r in caplog.records) >= 2,
                f"the held completion to time out ({timeout}) and be tried again",
            )
    finally:
        locker.rollback()
        thread.join(PATIENCE)
        pool.close()

    assert outcome["summary"].outcomes == {"completed": 6}
    assert {(r["status"], r["processed_count"], r["attempt_count"]) for r in rows(admin, schema)} == {
        ("completed", 100, 1)
    }
    assert log.cursors(held["id"]) == [None, "50"]
    assert log.overlaps() == 0


def test_a_statement_the_server_refuses_for_what_it_is_fails_at_once_without_retries(schema, database_url, admin):
    """Here a maintenance trigger refuses new rows (as an index would refuse a value too large for it)."""
    declaration = declare(schema, products(), owner_source=LANES)
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.activity("shops")  # creates the table
    for statement in [
        "CREATE SEQUENCE {jobs}_refusals",
        """CREATE FUNCTION {jobs}_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               PERFORM nextval(TG_TABLE_SCHEMA || '.jobs_refusals');
               RAISE EXCEPTION 'jobs are read-only during maintenance' USING ERRCODE = 'object_not_in_prerequisite_state';
           END $$""",
        "CREATE TRIGGER refuse BEFORE INSERT ON {jobs} FOR EACH ROW EXECUTE FUNCTION {jobs}_refuse()",
    ]:
        execute(admin, schema, statement)
    try:
        session = Session(declaration.database(database_url), give_up_after=timedelta(seconds=3))
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="read-only during maintenance"):
            planner.plan(Store(session), declaration.queue("shops"))
        session.close()
        [attempts] = (
            admin.execute(sql.SQL("SELECT last_value FROM {}.jobs_refusals").format(sql.Identifier(schema)))
            .fetchone()
            .values()
        )
        assert attempts == 1
    finally:
        for statement in [
            "DROP TRIGGER refuse ON {jobs}",
            "DROP FUNCTION {jobs}_refuse()",
            "DROP SEQUENCE {jobs}_refusals",
        ]:
            execute(admin, schema, statement)


REFUSE_RENEWALS = [
    "CREATE TABLE {jobs}_renewals_off (off boolean NOT NULL)",
    "INSERT INTO {jobs}_renewals_off VALUES (false)",
    "CREATE SEQUENCE {jobs}_refused_renewals",
    """CREATE FUNCTION {jobs}_refuse_renewal() RETURNS trigger LANGUAGE plpgsql AS $$
       DECLARE
           off boolean;
       BEGIN
           EXECUTE format('SELECT off FROM %%I.jobs_renewals_off', TG_TABLE_SCHEMA) INTO off;
           IF off AND NEW.cursor IS NOT DISTINCT FROM OLD.cursor AND NEW.status = OLD.status THEN
               PERFORM nextval(format('%%I.jobs_refused_renewals', TG_TABLE_SCHEMA));
               RAISE EXCEPTION 'renewals are off' USING ERRCODE = 'object_not_in_prerequisite_state';
           END IF;
           RETURN NEW;
       END $$""",
    "CREATE TRIGGER refuse_renewal BEFORE UPDATE ON {jobs} FOR EACH ROW EXECUTE FUNCTION {jobs}_refuse_renewal()",
]
ALLOW_RENEWALS = [
    "DROP TRIGGER IF EXISTS refuse_renewal ON {jobs}",
    "DROP FUNCTION IF EXISTS {jobs}_refuse_renewal()",
    "DROP SEQUENCE IF EXISTS {jobs}_refused_renewals",
    "DROP TABLE IF EXISTS {jobs}_renewals_off",
]


def test_a_refused_renewal_does_not_end_the_heartbeat(schema, database_url, admin):
    """A trigger refuses lease renewals for a while (a maintenance window on the table, say); once it stops,
    the heartbeat renews again. A failed renewal is logged, never the end of the heartbeat."""
    pages = paged(100, 50)

    def refused() -> int:
        query = sql.SQL("SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM {}.jobs_refused_renewals")
        return admin.execute(query.format(sql.Identifier(schema))).fetchone()["n"]

    def heartbeat(job_id: int):
        return rows(admin, schema, "id = %s", [job_id])[0]["heartbeat_at"]

    def handler(job: Job) -> Page:
        if job.cursor is None:  # a slow first page, during which renewals are refused, then allowed again
            execute(admin, schema, "UPDATE {jobs}_renewals_off SET off = true")
            wait_for(lambda: refused() >= 1, "a renewal to be refused")
            execute(admin, schema, "UPDATE {jobs}_renewals_off SET off = false")
            last = heartbeat(job.id)
            wait_for(lambda: heartbeat(job.id) > last, "the heartbeat to renew the lease again")
        return pages(job)

    declaration = declare(schema, products(handler), lease=timedelta(seconds=1.5))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    try:
        for statement in REFUSE_RENEWALS:
            execute(admin, schema, statement)
        slot = WorkerSlot(declaration, database, "shops")
        result = slot.run_one()
        slot.close()
    finally:
        for statement in ALLOW_RENEWALS:
            execute(admin, schema, statement)

    assert result.outcome is Outcome.COMPLETED
    [row] = rows(admin, schema)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", 100, 1)
