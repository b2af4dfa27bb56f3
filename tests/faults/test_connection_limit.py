"""More slots than the server has connections for: the slots that connect do the work, the pool says so when it
starts and names the refusal for what it is, and it returns as soon as the work is done -- the slots still
waiting to connect give up instead of holding the pool for minutes -- with no connection left open."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from synclane_provider.core import Database, Operations, WorkerPool
from tests.support.helpers import Background, connections_open, declare, owners, paged, products, rows

LIMIT = 4
SLOTS = 12


@pytest.fixture
def limited_role(admin, database_url, schema) -> Iterator[str]:
    """A worker role with data rights only and a connection limit of four; its name."""
    name = f"synclane_limited_{uuid.uuid4().hex[:8]}"
    role, schema_id = sql.Identifier(name), sql.Identifier(schema)
    with Operations(declare(schema, products()), Database(database_url, schema=schema)) as ops:
        ops.activity("shops")  # the table exists
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {}").format(role, sql.Literal(LIMIT)))
    for grant in (
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "GRANT USAGE ON SEQUENCE {schema}.jobs_id_seq TO {role}",
    ):
        admin.execute(sql.SQL(grant).format(schema=schema_id, role=role))
    try:
        yield name
    finally:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(role))
        admin.execute(sql.SQL("DROP ROLE {}").format(role))


def slow_pages(job):
    time.sleep(0.05)  # long enough for the refused slots to back off to their longest waits
    return paged(100, 50)(job)


def plan(schema: str, database_url: str, jobs: int = 40):
    declaration = declare(schema, products(slow_pages), owner_source=owners(*[f"owner-{n}" for n in range(jobs)]))
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops")
    return declaration


def test_a_pool_larger_than_the_connection_limit_does_the_work_says_so_and_returns_when_it_is_done(
    schema, database_url, limited_role, admin, caplog
):
    """Three of the role's four connections are held by another client of the same account: one slot gets a
    connection and does all the work; the other eleven keep being refused, and give up once it is done."""
    caplog.set_level(logging.WARNING)
    declaration = plan(schema, database_url)
    as_role = make_conninfo(database_url, user=limited_role)
    others = [psycopg.connect(as_role) for _ in range(LIMIT - 1)]
    try:
        summary = WorkerPool(declaration, declaration.database(as_role), "shops", slots=SLOTS).drain()
        returned = admin.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
    finally:
        for conn in others:
            conn.close()

    assert summary.outcomes == {"completed": 40}
    done = admin.execute(
        sql.SQL("SELECT max(completed_at) AS t FROM {}.jobs").format(sql.Identifier(schema))
    ).fetchone()["t"]
    assert (returned - done).total_seconds() < 1.5, "the pool waited for slots that could not connect"
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        f"pool of {SLOTS} slot(s) for queue shops needs {SLOTS} connection(s), but the server has room for 0 more" in m
        for m in messages
    )
    assert any("the server has no room for another connection (too many clients" in m for m in messages)
    assert connections_open(admin, user=limited_role) == []


def test_idle_slots_let_others_have_their_connections(schema, database_url, limited_role, admin):
    declaration = plan(schema, database_url, jobs=10)
    pool = WorkerPool(
        declaration,
        declaration.database(make_conninfo(database_url, user=limited_role)),
        "shops",
        slots=LIMIT,
        poll_interval=timedelta(seconds=0.3),
    )
    running = Background(pool.run, name="pool")
    try:
        deadline = time.monotonic() + 30
        while {r["status"] for r in rows(admin, schema)} != {"completed"}:
            assert time.monotonic() < deadline and running.is_alive()
            time.sleep(0.05)
        assert connections_open(admin, user=limited_role, settle=3.0) == []  # idle, the pool holds none
        with psycopg.connect(make_conninfo(database_url, user=limited_role)):
            pass  # and another client of the account gets in
    finally:
        pool.shutdown()
    assert running.result(30).outcomes == {"completed": 10}
