"""Every object that opens database connections closes them when its work is over, without the garbage collector.

Connections are counted in ``pg_stat_activity`` under an ``application_name`` of the test's own, for each of
the forms the docs show. The garbage collector is off throughout, so that nothing is closed by a finalizer.
"""

from __future__ import annotations

import dataclasses
import gc
import time
import uuid
from collections.abc import Iterator

import pytest

from synclane_provider.core import Operations, WorkerPool, WorkerSlot
from tests.support.helpers import Background, connections_open, declare, owners, paged, products


@pytest.fixture
def named_url(database_url: str) -> str:
    """The test database's URL with an application name no other client uses."""
    separator = "&" if "?" in database_url else "?"
    return f"{database_url}{separator}application_name=synclane-count-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def open_connections(admin, named_url: str):
    """How many connections of this test's application name the server has open now."""
    name = named_url.rsplit("application_name=", 1)[1]
    return lambda: len(connections_open(admin, application=name))


@pytest.fixture(autouse=True)
def no_garbage_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def declaration(schema):
    return declare(schema, products(paged(120)), owner_source=owners(*[f"owner-{n}" for n in range(30)]))


def test_three_drained_pools_in_a_row_leave_no_connection_open(declaration, named_url, open_connections):
    database = declaration.database(named_url)
    for round in range(3):
        with Operations(declaration, database) as ops:
            for n in range(30):
                ops.enqueue("shops", f"owner-{n}", "products", key=f"round-{round}")
        assert open_connections() == 0
        summary = WorkerPool(declaration, database, "shops", slots=20).drain()  # as docs/reference.md writes it
        assert summary.outcomes["completed"] == 30
        assert open_connections() == 0


def test_a_pool_run_until_shutdown_leaves_no_connection_open(declaration, named_url, open_connections):
    database = declaration.database(named_url)
    pool = WorkerPool(declaration, database, "shops", slots=5)
    running = Background(pool.run, name="pool")
    with Operations(declaration, database) as ops:
        ops.plan("shops")
        pool.wake()
        deadline = time.monotonic() + 30
        while not ops.activity("shops").drained:
            assert time.monotonic() < deadline, "the pool did not work the queue"
            time.sleep(0.05)
    pool.shutdown()
    assert running.result().outcomes["completed"] == 30
    assert open_connections() == 0


def test_operations_and_slots_close_when_their_block_ends(declaration, named_url, open_connections):
    database = declaration.database(named_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
        assert open_connections() == 1
    assert open_connections() == 0
    with WorkerSlot(declaration, database, "shops") as slot:
        assert slot.drain().outcomes["completed"] == 30
    assert open_connections() == 0


def test_closing_the_database_closes_what_was_opened_through_it(declaration, named_url, open_connections):
    with declaration.database(named_url) as database:
        ops = Operations(declaration, database)
        ops.plan("shops")
        slot = WorkerSlot(declaration, database, "shops")
        slot.run_one(then_continue=False)
        assert open_connections() == 2
    assert open_connections() == 0
    assert ops.activity("shops").due  # a closed database opens a new connection when used again
    ops.close()
    slot.close()
    assert open_connections() == 0


def test_a_pool_that_failed_leaves_no_connection_open(schema, named_url, open_connections):
    def exits(job):
        raise SystemExit("the handler asked the process to exit")

    declaration = declare(schema, products(exits), owner_source=owners("acme", "globex"))
    database = declaration.database(named_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    with pytest.raises(SystemExit):
        WorkerPool(declaration, database, "shops", slots=3).drain()
    assert open_connections() == 0


def test_a_pool_drained_twice_reconnects_and_closes_again(declaration, named_url, open_connections):
    database = declaration.database(named_url)
    pool = WorkerPool(declaration, database, "shops", slots=4)
    for round in range(2):
        with Operations(declaration, database) as ops:
            for n in range(30):
                ops.enqueue("shops", f"owner-{n}", "products", key=f"round-{round}")
        assert pool.drain().outcomes["completed"] == 30
        assert open_connections() == 0


@pytest.mark.parametrize(("synchronous_commit", "shown"), [(False, "off"), (True, "on")])
def test_a_worker_sessions_commits_wait_for_the_disk_only_when_the_declaration_asks(
    schema, database_url, synchronous_commit, shown
):
    declaration = dataclasses.replace(declare(schema, products()), synchronous_commit=synchronous_commit)
    with declaration.database(database_url) as database, WorkerSlot(declaration, database, "shops") as slot:
        assert slot.session._connection().execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == shown
