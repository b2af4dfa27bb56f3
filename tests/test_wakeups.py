"""What idle workers and sensors wait on: the wake-up statement, the initial-load statement, and release notifications."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
from psycopg import sql

from synclane_provider.core import Operations, Owner, WorkerSlot
from synclane_provider.core.db.queries import statement
from synclane_provider.core.db.wakeups import channel, waiter_key
from synclane_provider.core.records import Wakeup
from tests.support.helpers import declare, execute, orders, owners, paged, products

MINUTE = timedelta(minutes=1)


def wakeup(ops: Operations, clock) -> Wakeup:
    return ops.store.wakeup("shops", now=clock.now)


@contextmanager
def waiters_in_line(database_url: str, schema: str, count: int) -> Iterator[list[psycopg.Connection]]:
    """``count`` idle waiters of queue shops, each holding its key as a worker's trigger does, in line order."""
    waiters = [psycopg.connect(database_url, autocommit=True) for _ in range(count)]
    try:
        for conn in waiters:
            conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", list(waiter_key(schema, "shops")))
        waiters.sort(key=lambda conn: conn.info.backend_pid)  # the line is by backend pid
        yield waiters
    finally:
        for conn in waiters:
            conn.close()


def wakeup_turns(waiters: list[psycopg.Connection], schema: str, clock) -> list[tuple[bool, int]]:
    """What the wake-up statement tells each waiter: whether it is its turn to take, and how far behind it is."""
    key, query = waiter_key(schema, "shops"), statement("worker_wakeup", schema)
    values = {"queue": "shops", "now": clock.now, "waiter_class": key[0], "waiter_object": key[1]}
    found = []
    for conn in waiters:
        with psycopg.RawCursor(conn) as cur:
            takeable, behind = cur.execute(query.text, query.arguments(values)).fetchone()[:2]
        found.append((takeable, behind))
    return found


def test_a_due_job_in_a_free_lane_can_be_taken_but_not_in_a_busy_lane(schema, database_url, clock):
    declaration = declare(schema, products(), owner_source=owners(Owner("acme-us", "acme"), Owner("acme-eu", "acme")))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops", now=clock.now)
        assert wakeup(ops, clock).takeable is True
        holder = WorkerSlot(declaration, database, "shops", clock=clock)
        try:
            assert holder.take() is not None
            state = wakeup(ops, clock)
            # The other job of lane acme is due, but its lane is busy: an idle worker could not take it.
            assert state.takeable is False
            # It wakes again when the holder's lease would run out (the holder may have died).
            assert state.wake_at == clock.now + timedelta(minutes=5)
            clock.advance(timedelta(minutes=6))
            assert wakeup(ops, clock).takeable is True  # an expired lease is taken over
        finally:
            holder.close()


def test_the_wakeup_names_the_earliest_waiting_job(schema, database_url, clock):
    declaration = declare(schema, products())
    with Operations(declaration, declaration.database(database_url)) as ops:
        assert wakeup(ops, clock) == Wakeup(takeable=False, wake_at=None, now=clock.now)
        ops.enqueue("shops", "acme", "products", key="later", run_at=clock.now + 3 * MINUTE, now=clock.now)
        ops.enqueue("shops", "acme", "products", key="sooner", run_at=clock.now + MINUTE, now=clock.now)
        state = wakeup(ops, clock)
        assert (state.takeable, state.wake_at) == (False, clock.now + MINUTE)
        clock.advance(MINUTE)
        assert wakeup(ops, clock).takeable is True


def test_initial_load_waiting_lists_owners_not_complete(schema, database_url, admin, clock):
    declaration = declare(schema, orders(), products(), owner_source=owners("acme", "globex"))
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now, owner="acme")

        def waiting(type=None, settled=False):
            return ops.owners_still_loading("shops", ["acme", "globex"], type=type, settled=settled)

        assert waiting() == ["acme", "globex"]  # globex has nothing planned yet
        execute(admin, schema, "UPDATE {jobs} SET status = 'completed' WHERE owner = 'acme' AND type = 'products'")
        assert waiting(type="products") == ["globex"]
        assert waiting() == ["acme", "globex"]  # acme's orders history is not loaded yet
        execute(admin, schema, "UPDATE {jobs} SET status = 'completed' WHERE owner = 'acme' AND mode = 'initial'")
        execute(admin, schema, "UPDATE {jobs} SET status = 'pending' WHERE owner = 'acme' AND mode = 'recurring'")
        assert waiting() == ["globex"]  # recurring jobs are not part of the first load
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET status = 'abandoned' WHERE id = (SELECT min(id) FROM {jobs} WHERE owner = 'acme' AND type = 'orders' AND mode = 'initial')",
        )
        assert waiting() == ["acme", "globex"]
        assert waiting(settled=True) == ["globex"]


def test_a_job_handed_back_on_a_graceful_stop_notifies_idle_workers(schema, database_url):
    stop = threading.Event()
    inner = paged(500, 50)

    def handler(job):
        if job.cursor == "100":
            stop.set()
        return inner(job)

    declaration = declare(schema, products(handler))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema))))
        worker = WorkerSlot(declaration, database, "shops", stop=stop)
        try:
            assert worker.run_one().outcome.value == "released"
        finally:
            worker.close()
        received = [note.payload for note in listener.notifies(timeout=10, stop_after=1)]
    assert received == ["shops"]


def test_idle_waiters_take_turns_one_per_job_that_can_be_taken(schema, database_url, admin, clock):
    """Waiters holding the queue's key each see only their turn: with k jobs to take, the k first wake."""
    declaration = declare(schema, products(), owner_source=owners("acme", "globex", "initech"))
    with waiters_in_line(database_url, schema, 4) as waiters:

        def turns() -> list[tuple[bool, int]]:
            return wakeup_turns(waiters, schema, clock)

        with Operations(declaration, declaration.database(database_url)) as ops:
            assert turns() == [(False, 0)] * 4  # nothing to take: nobody is behind anyone
            ops.enqueue("shops", "acme", "products", key="one", now=clock.now)
            assert turns() == [(True, 0), (False, 1), (False, 2), (False, 3)]
            ops.enqueue("shops", "acme", "products", key="same-lane", now=clock.now)
            assert turns() == [(True, 0), (False, 1), (False, 2), (False, 3)], "one lane is one job to take"
            ops.enqueue("shops", "globex", "products", key="two", now=clock.now)
            assert turns() == [(True, 0), (True, 0), (False, 1), (False, 2)]
            waiters.pop(0).close()  # the first one woke: the others move up
            assert turns() == [(True, 0), (True, 0), (False, 1)]
        # Without the key (a worker looking for itself) it is first in line.
        with Operations(declaration, declaration.database(database_url)) as ops:
            assert ops.store.wakeup("shops", now=clock.now).takeable is True


def test_the_quiet_wake_up_counts_a_wide_lanes_due_jobs_as_that_many_units(schema, database_url, clock):
    """acme is 3 wide with 5 jobs due and globex 1 wide with 1: four jobs can be taken at once, so the first four
    waiters wake and the fifth sleeps on, one behind."""
    declaration = declare(schema, products(), owner_source=owners(Owner("acme", lane_width=3), "globex"))
    with Operations(declaration, declaration.database(database_url)) as ops:
        for n in range(5):
            ops.enqueue("shops", "acme", "products", key=f"acme-{n}", now=clock.now)
        ops.enqueue("shops", "globex", "products", key="globex", now=clock.now)
    with waiters_in_line(database_url, schema, 5) as waiters:
        assert wakeup_turns(waiters, schema, clock) == [(True, 0)] * 4 + [(False, 1)]
