"""The demo application's tables, reached with plain psycopg: the accounts we sync for, and what we synced.

Each thread (a worker slot) keeps one connection of its own, opened on first
use, never at import: Airflow imports this module when it parses DAG files.
A connection that broke is dropped and the error raised; the job fails, and
SyncLane retries it from its cursor.
"""

from __future__ import annotations

import functools
import threading

import psycopg
from psycopg import sql

from synclane_provider.core import Destination, Job, LandCounts
from synclane_provider.core.db.queries import named_statements

DEMO_ACCOUNTS = (("acme-us", "acme"), ("acme-eu", "acme"), ("globex", None), ("initech", None), ("umbrella", None))
"""The five accounts the demo connects: acme-us and acme-eu share acme's rate limit, so they share a lane;
the shop revokes umbrella's token after its first pages (its handler pauses it until it is resumed)."""


@functools.cache
def _statements() -> dict[str, str]:
    return named_statements(__package__, "store.sql")


class Store:
    """Where the demo keeps its data: ``schema.accounts``, ``schema.orders`` and ``schema.products``."""

    def __init__(self, conninfo: str | None, schema: str = "demo") -> None:
        self.conninfo = conninfo
        self.schema = schema
        self._local = threading.local()
        self._opened: list[psycopg.Connection] = []
        self._lock = threading.Lock()
        self.orders = Destination(
            f"{schema}.orders", key=("account", "id"), owner="account", version="updated_at", conninfo=conninfo
        )
        """Orders land by ``updated_at``: an older copy of an order never overwrites a newer one."""
        self.products = Destination(
            f"{schema}.products", key=("account", "id"), owner="account", deletions="delete", conninfo=conninfo
        )
        """The catalogue is a snapshot: products an account no longer lists are deleted when a sync completes."""

    def run(self, name: str, **params: object) -> list[tuple]:
        """Run one named statement of ``store.sql`` and return its rows."""
        query = sql.SQL(_statements()[name]).format(schema=sql.Identifier(self.schema))
        conn = self._connection()
        try:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description is not None else []
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self._local.conn = None
            conn.close()
            raise

    def _connection(self) -> psycopg.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            if not self.conninfo:
                raise RuntimeError("no database for the demo's tables: set SYNCLANE_DEMO_DATABASE_URL")
            conn = psycopg.connect(self.conninfo, autocommit=True, application_name="synclane-demo", connect_timeout=10)
            self._local.conn = conn
            with self._lock:
                self._opened = [c for c in self._opened if not c.closed] + [conn]
        return conn

    def prepare(self, accounts=DEMO_ACCOUNTS) -> None:
        """Create the tables and connect the demo accounts; repeating it changes nothing (a disconnected account stays so)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('synclane_demo.prepare'))")
            conn.execute(
                sql.SQL(_statements()["create_tables"])
                .format(schema=sql.Identifier(self.schema))
                .as_string(conn)
                .encode()
            )
            for account, lane in accounts:
                conn.execute(
                    sql.SQL(_statements()["connect_account"]).format(schema=sql.Identifier(self.schema)),
                    {"id": account, "lane": lane},
                )

    def connected_accounts(self) -> list[tuple[str, str | None]]:
        return [(row[0], row[1]) for row in self.run("connected_accounts")]

    def land_orders(self, job: Job, orders: list[dict]) -> LandCounts:
        """One page of orders: an order unchanged since it was stored writes nothing."""
        return self.orders.land(job, orders)

    def land_products(self, job: Job, products: list[dict], *, complete: bool) -> LandCounts:
        """One page of the catalogue; the last (``complete``) deletes what the account no longer lists."""
        return self.products.land(job, products, complete=complete)

    def close(self) -> None:
        """Close every thread's connection (each reopens on its next use)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self.orders.close()
        self.products.close()
