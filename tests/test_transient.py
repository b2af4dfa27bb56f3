"""A passing server error is waited out the same way by a worker's session and by a trigger's async watch.

Both connect with ``lock_timeout=100ms`` while an operator holds the jobs table locked: every look fails with
``lock_not_available`` until the lock goes, and then both answer, having logged what they waited for. A
statement refused for what it is fails at once on both.
"""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import Database, Operations
from synclane_provider.core.db.transient import Backoff, passes
from synclane_provider.core.db.watch import TableWatch
from tests.support.helpers import Background, declare, products

LOCKED_FOR = 0.8


def sync_look(database_url: str, schema: str):
    declaration = declare(schema, products())
    database = Database(connect=lambda: psycopg.connect(database_url, options="-c lock_timeout=100ms"), schema=schema)

    def look():
        with Operations(declaration, database) as ops:
            return ops.activity("shops")

    return look


def async_look(database_url: str, schema: str):
    async def connect():
        return await psycopg.AsyncConnection.connect(database_url, autocommit=True, options="-c lock_timeout=100ms")

    async def watch():
        async with TableWatch(connect=connect, schema=schema, queue="shops", listen=True, give_up_after=30) as table:
            return await table.activity()

    return lambda: asyncio.run(watch())


@pytest.mark.parametrize("look", [sync_look, async_look], ids=["worker session", "trigger watch"])
def test_a_lock_timeout_is_waited_out_and_then_answered(look, database_url, schema, admin, caplog):
    caplog.set_level(logging.WARNING)
    with Operations(declare(schema, products()), Database(database_url, schema=schema)) as ops:
        ops.plan("shops")
    ask = look(database_url, schema)
    with admin.transaction():
        admin.execute(sql.SQL("LOCK TABLE {}.jobs IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema)))
        asking = Background(ask, name="look")
        time.sleep(LOCKED_FOR)
        assert asking.is_alive()  # still waiting: neither failed nor answered while the table is locked
    activity = asking.result(30)

    assert activity.due and not activity.running
    waits = [r.getMessage() for r in caplog.records if "canceling statement due to lock timeout" in r.getMessage()]
    assert waits and all(message.startswith("database error during ") for message in waits)


@pytest.mark.parametrize("look", [sync_look, async_look], ids=["worker session", "trigger watch"])
def test_a_statement_refused_for_what_it_is_fails_at_once(look, database_url, fresh_schema):
    with Operations(declare(fresh_schema, products()), Database(database_url, schema=fresh_schema)) as ops:
        ops.plan("shops")
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER TABLE {}.jobs RENAME COLUMN lane TO lane_gone").format(sql.Identifier(fresh_schema))
        )
    started = time.monotonic()
    with pytest.raises(psycopg.errors.UndefinedColumn):
        look(database_url, fresh_schema)()
    assert time.monotonic() - started < 5


def test_the_backoff_doubles_up_to_its_cap_and_ends_at_its_deadline():
    backoff = Backoff(first=0.1, cap=0.4, give_up_after=1.0)
    waits = [backoff.next() for _ in range(4)]
    assert [0.05 <= waits[0] <= 0.1, 0.1 <= waits[1] <= 0.2, 0.2 <= waits[2] <= 0.4, 0.2 <= waits[3] <= 0.4] == [
        True
    ] * 4
    assert Backoff(first=2.0, give_up_after=1.0).next() is None


@pytest.mark.parametrize(
    ("error", "closed", "expected"),
    [
        (psycopg.errors.LockNotAvailable(), False, True),
        (psycopg.errors.QueryCanceled(), False, True),
        (psycopg.errors.SerializationFailure(), False, True),
        (psycopg.errors.AdminShutdown(), False, True),
        (psycopg.errors.TooManyConnections(), False, True),
        (psycopg.errors.UndefinedColumn(), False, False),
        (psycopg.errors.InsufficientPrivilege(), False, False),
        (psycopg.errors.UndefinedColumn(), True, True),  # the connection broke: whatever it said, try again
        (ValueError("not a database error"), True, False),
    ],
)
def test_what_passes(error, closed, expected):
    assert passes(error, connection_closed=closed) is expected
