"""Landing records in PostgreSQL: a Destination's page, one statement, against the usual upserts.

From one run on one server, the same rows (as an API gives them: no owner column) land in tables of the same shape
(text key pair, a version, three columns), one per way of landing, each page committed before the next:

* ``rows_per_s``: rows landed per second by ``Destination.land`` on the first landing (every row new), as a
  handler lands a page in a database other than the jobs database: the one statement that lands the page commits it.
* ``vs_executemany``: that over a plain ``executemany`` of an ``INSERT … ON CONFLICT … DO UPDATE`` of the same
  rows (psycopg 3 pipelines it), each page a transaction.
* ``vs_executemany_in_transaction``: ``Destination.write`` inside a transaction per page (a savepoint around the
  copy; in the jobs database a page lands so, in the transaction that saves its cursor) over the same.
* ``vs_insert_rows``: ``rows_per_s`` over Airflow's ``PostgresHook.insert_rows(..., replace=True)``, a commit per
  page.
* ``copy_vs_executemany``: a bare binary ``COPY`` of the first landing's rows (a table of its own, each page a
  statement committed alone, as the first landing's copy is; it lands nothing again) over the same
  ``executemany``: the most a landing that sends rows from Python by ``COPY`` reaches on this machine.
* ``unchanged_writes``: tuples written (n_tup_ins + n_tup_upd + n_tup_del) when the same rows land again.
* ``stale_writes``: the same when rows one version older land. Both are summed over the two Destination tables.

The ways take turns (in a rotating order, ten pages each), so the machine's load weighs on them alike; the
baselines build their tuples from the same rows inside the timed part, as their users would. The same three
passes (first landing, the same rows again, rows one version older) run on every side, and the ratios of the
second and third are printed too. The write counts are read from ``pg_stat_user_tables``, flushed after each
pass (``pg_stat_force_next_flush``); the first landing must count exactly one insert per row, which checks them.

    .venv/bin/python bench/land.py --quick              # 100,000 rows in pages of 1,000
    .venv/bin/python bench/land.py --rows 300000 --page 5000
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from harness import database_url, drop_schema
from psycopg import sql

from synclane_provider.core import Destination, Job, JobMode, JobStatus

OWNER = "acme"
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
PASSES = ("first", "again", "older")
WAYS = ("destination", "in_transaction", "executemany", "insert_rows", "copy")
DESTINATIONS = ("destination", "in_transaction")
FIRST_ONLY = ("copy",)
"""Ways that land new keys only: they take their turns in the first pass."""
COPY_TYPES = ("text", "text", "timestamptz", "text", "int4", "text")
TURN = 10
"""Pages each way lands before the next takes its turn."""


JOB = Job(
    id=1, queue="orders", owner=OWNER, lane=OWNER, type="orders", mode=JobMode.RECURRING, status=JobStatus.RUNNING,
    priority=0, window_start=None, window_end=None, dedup_key="bench", cursor=None, processed_count=0,
    attempt_count=1, error=None, next_run_at=T0, leased_by="bench", lease_expires_at=None, created_at=T0,
    started_at=T0, heartbeat_at=None, completed_at=None, stop_reason=None,
)  # fmt: skip
"""The job a handler lands its pages for."""


def records(count: int, *, older: bool = False) -> list[dict[str, Any]]:
    at = T0 - timedelta(minutes=1) if older else T0
    return [
        {"id": f"order-{i:08d}", "updated_at": at, "name": f"item {i % 977}", "price": i % 10_000, "status": "paid"}
        for i in range(count)
    ]


def pages(rows: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def as_tuples(page: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(OWNER, r["id"], r["updated_at"], r["name"], r["price"], r["status"]) for r in page]


def tuples_written(conn: psycopg.Connection, schema: str, tables: tuple[str, ...], *writers: psycopg.Connection) -> int:
    """Tuples written to the tables so far, the statistics of this backend and the writers' flushed."""
    for backend in (conn, *writers):
        backend.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(0.05)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    found = conn.execute(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables "
        "WHERE schemaname = %s AND relname = ANY(%s)",
        [schema, list(tables)],
    ).fetchone()
    assert found is not None
    return int(found[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 rows in pages of 1,000 (the defaults)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=1_000)
    args = parser.parse_args()
    url = database_url()
    schema = f"bench_land_{uuid.uuid4().hex[:8]}"
    spent = {(p, w): 0.0 for p in PASSES for w in WAYS}
    writes: dict[str, int] = {}
    os.environ["AIRFLOW_CONN_SYNCLANE_BENCH_LAND"] = url.replace("postgresql://", "postgres://", 1)
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    hook = PostgresHook(postgres_conn_id="synclane_bench_land")
    try:
        # The second connection is the destination's own, as conninfo would open it.
        with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url, autocommit=True) as landing:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            for way in WAYS:
                conn.execute(sql.SQL(TABLE).format(table=sql.Identifier(schema, way)))
            dest = Destination(
                f"{schema}.destination", key=KEY, owner="account", version="updated_at", connect=lambda: landing
            )
            in_transaction = Destination(f"{schema}.in_transaction", key=KEY, owner="account", version="updated_at")
            upsert = sql.SQL(UPSERT).format(table=sql.Identifier(schema, "executemany"))

            def destination(chunk: list[list[dict[str, Any]]]) -> None:
                for page in chunk:
                    dest.land(JOB, page)

            def in_a_transaction(chunk: list[list[dict[str, Any]]]) -> None:
                for page in chunk:
                    with conn.transaction():
                        in_transaction.write(conn, page, owner=OWNER)

            def executemany(chunk: list[list[dict[str, Any]]]) -> None:
                with conn.cursor() as cur:
                    for page in chunk:
                        with conn.transaction():
                            cur.executemany(upsert, as_tuples(page))

            def insert_rows(chunk: list[list[dict[str, Any]]]) -> None:
                rows = [row for page in chunk for row in as_tuples(page)]
                hook.insert_rows(
                    f"{schema}.insert_rows", rows, target_fields=list(COLUMNS), commit_every=args.page, replace=True,
                    replace_index=list(KEY),
                )  # fmt: skip

            copy_rows = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
                sql.Identifier(schema, "copy"), sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
            )

            def copy(chunk: list[list[dict[str, Any]]]) -> None:
                with conn.cursor() as cur:
                    for page in chunk:
                        with cur.copy(copy_rows) as copying:  # autocommit: the statement commits the page
                            copying.set_types(list(COPY_TYPES))
                            for row in as_tuples(page):
                                copying.write_row(row)

            run: dict[str, Callable[[list[list[dict[str, Any]]]], None]] = {
                "destination": destination,
                "in_transaction": in_a_transaction,
                "executemany": executemany,
                "insert_rows": insert_rows,
                "copy": copy,
            }
            before = 0
            for name, rows in zip(PASSES, (records(args.rows), records(args.rows), records(args.rows, older=True))):
                all_pages = pages(rows, args.page)
                for turn, start in enumerate(range(0, len(all_pages), TURN)):
                    chunk = all_pages[start : start + TURN]
                    for way in WAYS[turn % len(WAYS) :] + WAYS[: turn % len(WAYS)]:
                        if way in FIRST_ONLY and name != "first":
                            continue
                        started = time.perf_counter()
                        run[way](chunk)
                        spent[name, way] += time.perf_counter() - started
                after = tuples_written(conn, schema, DESTINATIONS, landing)
                writes[name], before = after - before, after
    finally:
        drop_schema(url, schema)
    if writes["first"] != args.rows * len(DESTINATIONS):
        raise SystemExit(
            f"the first landing counted {writes['first']} tuples written, not {args.rows * len(DESTINATIONS)}: "
            "no figures"
        )
    for name in PASSES:
        print(
            f"{name:>6}: "
            + "  ".join(
                f"{way} {args.rows / spent[name, way]:,.0f} rows/s"
                for way in WAYS
                if name == "first" or way not in FIRST_ONLY
            )
            + f"  vs_executemany {spent[name, 'executemany'] / spent[name, 'destination']:.2f}"
        )
    rows_per_s = args.rows / spent["first", "destination"]
    print(
        f"rows={args.rows} page={args.page} "
        f"vs_executemany_again={spent['again', 'executemany'] / spent['again', 'destination']:.2f} "
        f"vs_executemany_older={spent['older', 'executemany'] / spent['older', 'destination']:.2f}"
    )
    print(
        f"rows_per_s={rows_per_s:.0f} "
        f"vs_executemany={spent['first', 'executemany'] / spent['first', 'destination']:.2f} "
        f"vs_executemany_in_transaction={spent['first', 'executemany'] / spent['first', 'in_transaction']:.2f} "
        f"vs_insert_rows={spent['first', 'insert_rows'] / spent['first', 'destination']:.2f} "
        f"copy_vs_executemany={spent['first', 'executemany'] / spent['first', 'copy']:.2f} "
        f"unchanged_writes={writes['again']} stale_writes={writes['older']}"
    )


if __name__ == "__main__":
    main()
