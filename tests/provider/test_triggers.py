"""Triggers against real PostgreSQL: what wakes the idle worker's trigger, what does not, and their serialization."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.serde import deserialize, serialize
from psycopg import sql

from synclane_provider.core import WorkerSlot
from synclane_provider.core.db.schema_versions import create_schema, migrate, shipped_migrations
from synclane_provider.triggers.drained import DrainedTrigger
from synclane_provider.triggers.due import JobDueTrigger
from synclane_provider.triggers.initial_load import InitialLoadTrigger
from tests.support import provider_declaration as decl
from tests.support.helpers import execute
from tests.support.provider_helpers import (
    first_event,
    in_background,
    operations,
    together,
    unique_name,
    wait_until_waiting,
)

pytestmark = pytest.mark.airflow


def due_trigger(conn_id="synclane_default", *, seconds=30.0, poll_interval=60.0, **overrides) -> JobDueTrigger:
    kwargs = dict(
        synclane_conn_id=conn_id,
        schema=decl.synclane.schema,
        queue="shops",
        until=datetime.now(timezone.utc) + timedelta(seconds=seconds),
        poll_interval=poll_interval,
        carry={"deferrals": 1},
    )
    kwargs.update(overrides)
    return JobDueTrigger(**kwargs)


TRIGGERS = [
    (
        JobDueTrigger,
        dict(
            synclane_conn_id="c",
            schema="s",
            queue="q",
            until=datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc),
            poll_interval=5.0,
            give_up_after=60.0,
            carry={"summary": {"jobs": 3}, "deferrals": 2},
            patience=2.5,
            settle_until=datetime(2026, 11, 30, 9, 0, 10, tzinfo=timezone.utc),
        ),
    ),
    (
        InitialLoadTrigger,
        dict(
            synclane_conn_id="c",
            schema="s",
            queue="q",
            owners=["a", "b"],
            job_type="orders",
            settled=True,
            more=3,
            poll_interval=7.0,
            give_up_after=60.0,
        ),
    ),
    (
        DrainedTrigger,
        dict(synclane_conn_id="c", schema="s", queue="q", lane="acme", poll_interval=3.0, give_up_after=60.0),
    ),
]


@pytest.mark.parametrize(("cls", "kwargs"), TRIGGERS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_trigger_serializes_exactly_its_constructor_arguments(cls, kwargs):
    classpath, serialized = cls(**kwargs).serialize()
    assert classpath == f"{cls.__module__}.{cls.__qualname__}"
    assert serialized == kwargs
    # The way the task runner hands them to the triggerer (and dag.test() back to the class).
    rebuilt = cls(**deserialize(serialize(serialized)))
    assert rebuilt.serialize() == (classpath, kwargs)


def test_the_due_trigger_fires_at_once_when_a_job_can_be_taken(provider_schema):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    event = first_event(due_trigger())
    assert event == {"status": "due", "queue": "shops", "carry": {"deferrals": 1}}


def test_the_due_trigger_yields_nothing_before_its_deferral_has_settled(provider_schema):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    settled = datetime.now(timezone.utc) + timedelta(seconds=2)
    assert first_event(due_trigger(settle_until=settled))["status"] == "due"
    # A job was due all along; the event still came only once the deferral had settled.
    assert datetime.now(timezone.utc) >= settled


def test_the_due_trigger_wakes_on_notify_when_a_job_is_enqueued(provider_schema, admin, connection):
    name = unique_name("due-notify")
    trigger = due_trigger(connection(application_name=name))  # polls only every 60 s: only NOTIFY can wake it
    waiting = in_background(trigger)
    wait_until_waiting(admin, name, waiting)
    started = time.monotonic()
    with operations(decl.synclane) as ops:
        ops.enqueue("shops", "initech", "products", key="by-hand")
    assert waiting.result(timeout=30)["status"] == "due"
    assert time.monotonic() - started < 20


def waiting_count(admin, name: str) -> int:
    return admin.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
        " AND query LIKE 'WITH RECURSIVE clock%%'",
        [name],
    ).fetchone()["n"]


def test_one_notify_wakes_one_idle_worker_per_job_not_all_of_them(provider_schema, admin, connection):
    """Six idle workers, waiting in one triggerer, one job at a time: one wakes for each, not six. (A waiter whose
    look comes after the one ahead of it has left and before that one's worker took the job wakes too, so under
    load a job may wake two or three: bench/wakeup.py measures the average, 1.03-1.10 with 24 waiters.)"""
    name = unique_name("due-herd")
    conn_id = connection(application_name=name)
    waiting = together([due_trigger(conn_id, seconds=12) for _ in range(6)])
    try:
        deadline = time.monotonic() + 20
        while waiting_count(admin, name) < 6:
            assert time.monotonic() < deadline, "the triggers did not all start waiting"
            time.sleep(0.02)
        with operations(decl.synclane) as ops:
            ops.enqueue("shops", "initech", "products", key="one")
            deadline = time.monotonic() + 20
            while not any(w.done() for w in waiting):
                assert time.monotonic() < deadline, "no trigger woke"
                time.sleep(0.01)
            time.sleep(1.0)  # the others had every chance to wake too
            first = sum(w.done() for w in waiting)
            assert 1 <= first <= 3, f"{first} of 6 idle workers woke for one job"
            holder = WorkerSlot(decl.synclane, ops.session.database, "shops")
            try:
                assert holder.run_one() is not None  # the woken worker takes its job
                ops.enqueue("shops", "globex", "products", key="two")
                deadline = time.monotonic() + 20
                while sum(w.done() for w in waiting) < first + 1:
                    assert time.monotonic() < deadline, "no trigger woke for the second job"
                    time.sleep(0.01)
                time.sleep(1.0)
                assert sum(w.done() for w in waiting) <= first + 3, "the second job woke every idle worker"
                assert all(w.result()["status"] == "due" for w in waiting if w.done())
                assert holder.run_one() is not None
            finally:
                holder.close()
    finally:
        # The rest give up at their deadline (nothing else came); none is left waiting in line for the next test.
        for w in waiting:
            assert w.result(timeout=60)["status"] in ("due", "timeout")


def test_a_waiter_behind_one_that_never_wakes_wakes_after_its_patience(
    provider_schema, admin, connection, database_url
):
    """A waiter ahead in line that is stuck (here: a bare connection holding the queue's key) costs a delay of
    ``patience`` per place, never a job left waiting."""
    import psycopg

    from synclane_provider.core.db.wakeups import waiter_key

    stuck = [psycopg.connect(database_url, autocommit=True) for _ in range(2)]
    try:
        for conn in stuck:
            conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", list(waiter_key(provider_schema, "shops")))
        name = unique_name("due-patience")
        waiting = in_background(due_trigger(connection(application_name=name), patience=0.5))
        wait_until_waiting(admin, name, waiting)
        [pid] = [
            r["pid"]
            for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [name]).fetchall()
        ]
        ahead = sum(conn.info.backend_pid < pid for conn in stuck)
        started = time.monotonic()
        with operations(decl.synclane) as ops:
            ops.enqueue("shops", "initech", "products", key="one")
        assert waiting.result(timeout=30)["status"] == "due"
        waited = time.monotonic() - started
        # ``ahead`` waiters before it and one job: it is ``ahead`` places behind its turn.
        assert ahead * 0.5 - 0.1 <= waited < ahead * 0.5 + 5, (ahead, waited)
    finally:
        for conn in stuck:
            conn.close()


def test_the_due_trigger_wakes_when_a_stopping_worker_hands_its_job_back(provider_schema, admin, connection):
    decl.GATE.clear()
    with operations(decl.synclane) as ops:
        ops.plan("slow")
    slot = WorkerSlot(decl.synclane, operations(decl.synclane).session.database, "slow")
    running = threading.Thread(target=slot.run_one)
    running.start()
    try:
        assert decl.IN_FLIGHT.wait(20)
        name = unique_name("due-release")
        waiting = in_background(due_trigger(connection(application_name=name), queue="slow"))
        wait_until_waiting(admin, name, waiting)  # the only job is running: nothing to take
        slot.stop.set()
        decl.GATE.set()
        assert waiting.result(timeout=30)["status"] == "due"
    finally:
        decl.GATE.set()
        running.join(30)
        slot.close()
    [row] = admin.execute(f'SELECT status, cursor FROM "{provider_schema}".jobs').fetchall()
    assert (row["status"], row["cursor"]) == ("pending", "100")


def test_the_due_trigger_fires_when_a_waiting_job_becomes_due(provider_schema, admin):
    db_now = admin.execute("SELECT now() AS now").fetchone()["now"]
    with operations(decl.synclane) as ops:
        ops.enqueue("shops", "initech", "products", key="soon", run_at=db_now + timedelta(seconds=1.5))
    started = time.monotonic()
    event = first_event(due_trigger(poll_interval=60.0))
    assert event["status"] == "due"
    assert time.monotonic() - started >= 1.0  # not before the job was due


def test_a_due_job_in_a_busy_lane_does_not_wake_the_trigger_but_an_expired_lease_does(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.enqueue("shops", "acme-us", "products", lane="acme", key="first")
        ops.enqueue("shops", "acme-eu", "products", lane="acme", key="second")
    holder = WorkerSlot(decl.synclane, operations(decl.synclane).session.database, "shops")
    try:
        assert holder.take() is not None  # lane acme is busy; its other job is due but cannot run
        assert first_event(due_trigger(seconds=1.5, poll_interval=0.2))["status"] == "timeout"
        execute(
            admin,
            provider_schema,
            "UPDATE {jobs} SET lease_expires_at = now() - interval '1 second' WHERE status = 'running'",
        )
        assert first_event(due_trigger(seconds=10))["status"] == "due"
    finally:
        holder.close()


def test_the_due_trigger_reports_an_error_when_the_database_stays_unreachable(provider_schema, connection):
    event = first_event(due_trigger(connection(port=1), give_up_after=0.5))
    assert event["status"] == "error"
    assert "unreachable" in event["message"]
    assert event["carry"] == {"deferrals": 1}


def test_the_due_trigger_waits_for_a_dropped_schema_to_be_made_again(provider_schema, admin):
    admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(provider_schema)))
    waiting = in_background(due_trigger())
    time.sleep(1.0)  # it looks at a schema that is not there, and waits
    assert not waiting.done(), waiting.result()
    create_schema(admin, provider_schema)  # as the next planning run does
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    assert waiting.result(timeout=30)["status"] == "due"


def test_the_due_trigger_waits_for_a_schema_that_is_being_made_again_until_its_last_migration(provider_schema, admin):
    """Each migration commits on its own: a look between two of them finds a jobs table without the columns
    of the later ones, which is waited for like a missing table, not reported as an error."""
    admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(provider_schema)))
    migrate(admin, provider_schema, shipped_migrations()[:1])  # the jobs table, without lane_width yet
    waiting = in_background(due_trigger())
    time.sleep(1.0)  # it looks at a half-made schema, and waits
    assert not waiting.done(), waiting.result()
    create_schema(admin, provider_schema)  # the rest of the migrations
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    assert waiting.result(timeout=30)["status"] == "due"


def test_triggers_write_nothing_and_close_their_connections(provider_schema, admin, connection):
    name = unique_name("read-only")
    # Every transaction of the triggers' connection is read-only: a write would fail the trigger.
    conn_id = connection(application_name=name, options="-c default_transaction_read_only=on")
    common = dict(synclane_conn_id=conn_id, schema=provider_schema, queue="shops")
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    events = [first_event(due_trigger(conn_id))]
    execute(admin, provider_schema, "UPDATE {jobs} SET status = 'completed'")
    owners = ["acme-us", "acme-eu", "globex", "initech"]
    events.append(first_event(InitialLoadTrigger(owners=owners, poll_interval=0.2, **common)))
    events.append(first_event(DrainedTrigger(poll_interval=0.2, **common)))
    assert [event["status"] for event in events] == ["due", "success", "success"]
    deadline = time.monotonic() + 10
    while admin.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s", [name]).fetchone()[
        "n"
    ]:
        assert time.monotonic() < deadline, "a trigger left its connection open"
        time.sleep(0.02)
