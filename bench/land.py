"""Landing records in PostgreSQL: a Destination's COPY + one guarded upsert per page, against the usual upserts.

From one run on one server, into fresh tables of the same shape (text key pair, a version, three columns):

* ``rows_per_s``: rows landed per second by ``Destination.write``, one transaction per page.
* ``vs_executemany``: that over a plain ``executemany`` of an ``INSERT … ON CONFLICT … DO UPDATE`` of the same
  rows, one transaction per page (psycopg 3 pipelines executemany).
* ``vs_insert_rows``: that over Airflow's ``PostgresHook.insert_rows(..., replace=True)``, one commit per page.
* ``unchanged_writes``: tuples written (n_tup_ins + n_tup_upd + n_tup_del) when the same rows land again.
* ``stale_writes``: the same when rows one version older land.

The two write counts are read from ``pg_stat_xact_user_tables`` before and after the landing, in the one
transaction that did it (each page a savepoint in it), so the statistics' flush delay plays no part (the view
also holds counts of earlier transactions not flushed yet, hence the difference).

    .venv/bin/python bench/land.py --quick              # 100,000 rows; the baselines on 20,000 of them
    .venv/bin/python bench/land.py --rows 300000 --page 5000
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from harness import database_url, drop_schema
from psycopg import sql

from synclane_provider.core import Destination

COLUMNS = ("account", "id", "updated_at", "name", "price", "status")
KEY = ("account", "id")
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
TABLE = """
CREATE TABLE {table} (
    account text NOT NULL, id text NOT NULL, updated_at timestamptz NOT NULL, name text NOT NULL,
    price integer NOT NULL, status text NOT NULL, PRIMARY KEY (account, id)
)"""
UPSERT = """
INSERT INTO {table} (account, id, updated_at, name, price, status) VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (account, id) DO UPDATE
SET updated_at = excluded.updated_at, name = excluded.name, price = excluded.price, status = excluded.status"""


def records(count: int, *, older: bool = False) -> list[dict[str, Any]]:
    at = T0 - timedelta(minutes=1) if older else T0
    return [
        {"id": f"order-{i:08d}", "updated_at": at, "name": f"item {i % 977}", "price": i % 10_000, "status": "paid"}
        for i in range(count)
    ]


def pages(rows: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def written(conn: psycopg.Connection, schema: str) -> int:
    """Tuples written to the table in the current transaction."""
    found = conn.execute(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables "
        "WHERE schemaname = %s AND relname = 'land'",
        [schema],
    ).fetchone()
    assert found is not None
    return int(found[0])


def land_all(conn: psycopg.Connection, dest: Destination, rows: list[dict[str, Any]], size: int, schema: str) -> int:
    """Land every page (each a savepoint) in one transaction; the tuples that wrote."""
    with conn.transaction():
        before = written(conn, schema)  # may hold earlier transactions' counts not yet flushed to the statistics
        for page in pages(rows, size):
            with conn.transaction():
                dest.write(conn, page, owner="acme")
        return written(conn, schema) - before


def fresh_table(conn: psycopg.Connection, schema: str) -> sql.Composed:
    table = sql.Identifier(schema, "land")
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(sql.SQL(TABLE).format(table=table))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 rows, baselines on 20,000")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--baseline-rows", type=int, default=20_000)
    parser.add_argument("--page", type=int, default=1_000)
    args = parser.parse_args()
    url = database_url()
    schema = f"bench_land_{uuid.uuid4().hex[:8]}"
    rows = records(args.rows)
    baseline = records(min(args.baseline_rows, args.rows))
    as_tuples = [("acme", *(r[c] for c in COLUMNS[1:])) for r in baseline]
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            table = fresh_table(conn, schema)
            dest = Destination(f"{schema}.land", key=KEY, owner="account", version="updated_at")
            started = time.perf_counter()
            for page in pages(rows, args.page):
                with conn.transaction():
                    dest.write(conn, page, owner="acme")
            land_seconds = time.perf_counter() - started
            rows_per_s = args.rows / land_seconds
            unchanged_writes = land_all(conn, dest, rows, args.page, schema)
            stale_writes = land_all(conn, dest, records(args.rows, older=True), args.page, schema)

            table = fresh_table(conn, schema)
            upsert = sql.SQL(UPSERT).format(table=table)
            started = time.perf_counter()
            with conn.cursor() as cur:
                for page in pages(as_tuples, args.page):  # type: ignore[arg-type]
                    with conn.transaction():
                        cur.executemany(upsert, page)
            executemany_per_s = len(as_tuples) / (time.perf_counter() - started)

        fresh = psycopg.connect(url, autocommit=True)
        with fresh:
            fresh_table(fresh, schema)
        os.environ["AIRFLOW_CONN_SYNCLANE_BENCH_LAND"] = url.replace("postgresql://", "postgres://", 1)
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        hook = PostgresHook(postgres_conn_id="synclane_bench_land")
        started = time.perf_counter()
        hook.insert_rows(
            f"{schema}.land", as_tuples, target_fields=list(COLUMNS), commit_every=args.page, replace=True,
            replace_index=list(KEY),
        )  # fmt: skip
        insert_rows_per_s = len(as_tuples) / (time.perf_counter() - started)
    finally:
        drop_schema(url, schema)
    print(
        f"rows={args.rows} page={args.page} baseline_rows={len(as_tuples)} "
        f"executemany_rows_per_s={executemany_per_s:.0f} insert_rows_rows_per_s={insert_rows_per_s:.0f}"
    )
    print(
        f"rows_per_s={rows_per_s:.0f} vs_executemany={rows_per_s / executemany_per_s:.2f} "
        f"vs_insert_rows={rows_per_s / insert_rows_per_s:.2f} unchanged_writes={unchanged_writes} "
        f"stale_writes={stale_writes}"
    )


if __name__ == "__main__":
    main()
