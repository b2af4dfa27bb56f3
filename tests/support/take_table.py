"""Jobs written straight into the jobs table, for the tests of which jobs a take picks (test_take_order.py,
test_take_many.py): each job of a lane, an owner, a type, a status and a window that ended some days before ``now``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import psycopg

from synclane_provider.core import Operations
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Store
from tests.support.helpers import declare, execute, orders, owners, products


class ShopsTable:
    """An empty jobs table of the queue shops (types products and orders, no owner source), and a store of it."""

    def __init__(self, schema: str, database_url: str, admin: psycopg.Connection) -> None:
        self.schema = schema
        self.admin = admin
        self.declaration = declare(schema, products(), orders(), owner_source=owners())
        self.database = self.declaration.database(database_url)
        with Operations(self.declaration, self.database) as ops:
            ops.activity("shops")  # creates the table
        self.session = Session(self.database)
        self.store = Store(self.session)

    def close(self) -> None:
        self.session.close()
        self.database.close()


def add_job(
    conn: psycopg.Connection,
    schema: str,
    now: datetime,
    lane: str,
    *,
    days_ago: int,
    status: str = "pending",
    type: str = "orders",
    owner: str | None = None,
    width: int = 1,
    running_by: str | None = None,
    lease_left: timedelta = timedelta(hours=1),
    due_in: timedelta = -timedelta(hours=1),
) -> None:
    """A job of queue shops in ``lane`` (of the owner of the lane's name unless ``owner``), whose one-day window
    ended ``days_ago`` days before ``now``, due ``due_in`` from now (an hour ago); of type products (priority 0) or
    orders (priority 1); when ``running_by`` names a worker, running for it with ``lease_left`` of its lease."""
    end = now - timedelta(days=days_ago)
    execute(
        conn,
        schema,
        "INSERT INTO {jobs} (queue, owner, lane, lane_width, type, mode, status, priority, window_start,"
        " window_end, dedup_key, next_run_at, leased_by, lease_expires_at, attempt_count)"
        " VALUES ('shops', %s, %s, %s, %s, 'initial', %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            owner or lane,
            lane,
            width,
            type,
            status,
            0 if type == "products" else 1,
            end - timedelta(days=1),
            end,
            f"initial:{lane}:{days_ago}:{status}:{owner}",
            now + due_in,
            running_by,
            now + lease_left if running_by else None,
            1 if running_by else 0,
        ],
    )


@contextmanager
def another_take_holding(
    conn: psycopg.Connection, schema: str, now: datetime, lane: str, *, days_ago: int
) -> Iterator[None]:
    """While in it, the job of ``lane`` whose window ended ``days_ago`` is row-locked by another take (``conn``'s
    transaction), which may yet lose its race for the lane and hand the job back."""
    with conn.transaction():
        execute(
            conn,
            schema,
            "SELECT id FROM {jobs} WHERE lane = %s AND window_end = %s FOR UPDATE",
            [lane, now - timedelta(days=days_ago)],
        )
        yield
