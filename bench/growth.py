"""Growth: the hot paths with 100,000 and with 10,000,000 rows of history in the same queue.

One queue, 10,000 owners, a windowed type (730-day horizon, 73-day slices, every 15 minutes) and a daily
snapshot, planned once (120,000 waiting jobs), beside a history of completed recurring jobs spread
over the owners -- built with one set-based INSERT (generate_series), not through the API, with the
indexes dropped and rebuilt around it. Each size lives in a schema of its own in a database this script
creates and drops (``synclane_growth_<pid>``), and the sizes are measured in turns, so that the shared
machine's noise falls on both alike:

* the take: ``finish_and_take`` completing the last job and leasing the next, p50 and p95 per job;
* a no-op replan of the 10,000 owners (``Operations.plan`` inserting nothing);
* an owner's initial-load progress (``Operations.progress``);
* the heaviest reads of the operator's side: the owners view's first page (50 owners: initial load,
  freshness, trouble) and the planning run's gauges (counts and the largest freshness lag of all 10,000).

The last line gives each figure at 10M over 100k (goal: at most 1.5 for the take, the replan and progress;
the views read one index entry per owner, so their figures grow until each owner's entry has a page of
its own, then stay).

    .venv/bin/python bench/growth.py            # 100,000 and 10,000,000 rows of history
    .venv/bin/python bench/growth.py --quick    # 100,000 and 1,000,000 (under two minutes)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import datetime, timedelta, timezone

import psycopg
from harness import database_url
from plan import plan_declaration
from psycopg import sql
from psycopg.conninfo import make_conninfo

from synclane_provider.core import JobStatus, Operations, Owner, SyncLane
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Finish, Store
from synclane_provider.core.ops.monitor import Monitor
from synclane_provider.core.schema import create_schema

NOW = datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc)
DAY = timedelta(days=1)
OWNERS = 10_000
ROUNDS = 3
TAKES = 200
PROGRESS_OWNERS = 200
VIEW_CALLS = 5

HISTORY = """
INSERT INTO {jobs} (queue, owner, lane, type, mode, status, priority, window_start, window_end, dedup_key,
                    processed_count, attempt_count, next_run_at, created_at, started_at, heartbeat_at, completed_at)
SELECT 'shops', 'owner-' || o, 'owner-' || o, 'orders', 'recurring', 'completed', 0,
       e - interval '20 minutes', e,
       'recurring:' || to_char(e AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       25, 1, e, e, e, e + interval '1 minute', e + interval '1 minute'
FROM (
    SELECT (i - 1) %% %(owners)s + 1 AS o,
           %(newest)s::timestamptz - ((i - 1) / %(owners)s) * interval '15 minutes' AS e
    FROM generate_series(1, %(rows)s) AS i
) AS h
"""


def growth_declaration(schema: str) -> SyncLane:
    return plan_declaration(schema, [Owner(f"owner-{i}") for i in range(1, OWNERS + 1)], 730, slice_days=73)


def build(url: str, schema: str, history: int) -> float:
    """The schema with ``history`` completed rows and a first plan; returns the seconds it took."""
    started = time.perf_counter()
    jobs = sql.SQL("{}.jobs").format(sql.Identifier(schema))
    with psycopg.connect(url, autocommit=True) as conn:
        create_schema(conn, schema)
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '256MB'")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'jobs' "
            "AND indexname <> 'jobs_pkey'",
            [schema],
        ).fetchall()
        for name, _ in indexes:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(name)))
        conn.execute(
            sql.SQL(HISTORY).format(jobs=jobs),
            {"owners": OWNERS, "rows": history, "newest": NOW.replace(hour=0, minute=0) - DAY},
        )
        for _, definition in indexes:
            conn.execute(definition)
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
    declaration = growth_declaration(schema)
    with Operations(declaration, declaration.database(url)) as ops:
        ops.plan("shops", now=NOW)  # the first plan: reads each owner's history once into its coverage row
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.coverage").format(sql.Identifier(schema)))
    return time.perf_counter() - started


def takes(url: str, schema: str, count: int, worker: str) -> list[float]:
    """Seconds per ``finish_and_take``, each completing the job the last one leased."""
    declaration = growth_declaration(schema)
    store = Store(Session(declaration.database(url)))
    seconds = []
    held = None
    try:
        for _ in range(count + 1):
            finish = Finish(held, JobStatus.COMPLETED, 1) if held is not None else None
            started = time.perf_counter()
            result = store.finish_and_take(
                queue="shops", worker=worker, lease=timedelta(minutes=5), finish=finish, take=True, now=None
            )
            elapsed = time.perf_counter() - started
            if held is not None:
                seconds.append(elapsed)
            assert result.taken is not None, "nothing to take"
            held = result.taken.job.id
        store.finish_and_take(
            queue="shops",
            worker=worker,
            lease=timedelta(minutes=5),
            finish=Finish(held, JobStatus.COMPLETED, 1),
            take=False,
            now=None,
        )
    finally:
        store.session.close()
    return seconds


def replan(url: str, schema: str) -> float:
    declaration = growth_declaration(schema)
    with Operations(declaration, declaration.database(url)) as ops:
        ops.activity("shops")  # connect outside the timing
        started = time.perf_counter()
        summary = ops.plan("shops", now=NOW)
        elapsed = time.perf_counter() - started
    assert summary.total == 0, f"a repeated plan inserted {summary.total} jobs"
    return elapsed


def progress(url: str, schema: str, owners: list[str], ops: Operations) -> list[float]:
    seconds = []
    for owner in owners:
        started = time.perf_counter()
        result = ops.progress("shops", owner)
        seconds.append(time.perf_counter() - started)
        assert result.total > 0
    return seconds


def views(ops: Operations) -> tuple[float, float]:
    """Seconds for the owners view's first page and for the queue's gauges."""
    started = time.perf_counter()
    page = Monitor(ops).owners("shops", now=NOW)
    owners_view = time.perf_counter() - started
    assert len(page.items) == 50
    started = time.perf_counter()
    ops.gauges("shops", now=NOW)
    return owners_view, time.perf_counter() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000,000 rows of history instead of 10,000,000")
    parser.add_argument("--large", type=int, default=None, help="rows of history of the large table")
    args = parser.parse_args()
    sizes = {"small": 100_000, "large": args.large or (1_000_000 if args.quick else 10_000_000)}

    base = database_url()
    name = f"synclane_growth_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(base, dbname=name)
    try:
        for label, rows in sizes.items():
            seconds = build(url, f"growth_{label}", rows)
            print(f"built {label}: {rows:,} rows of history and a first plan in {seconds:.1f} s", flush=True)
        with psycopg.connect(url, autocommit=True) as conn:
            for label in sizes:
                size = conn.execute(
                    "SELECT count(*) AS n, pg_total_relation_size(%s) AS bytes FROM {}".format(
                        sql.Identifier(f"growth_{label}").as_string(conn) + ".jobs"
                    ),
                    [f"growth_{label}.jobs"],
                ).fetchone()
                print(f"{label}: {size[0]:,} rows, {size[1] / 2**20:,.0f} MiB with indexes")
        owners = [f"owner-{i}" for i in range(1, OWNERS + 1, OWNERS // PROGRESS_OWNERS)] * ROUNDS
        connected = {
            label: Operations(
                growth_declaration(f"growth_{label}"), growth_declaration(f"growth_{label}").database(url)
            )
            for label in sizes
        }
        for ops in connected.values():
            ops.activity("shops")  # connect outside the timing
        found: dict[str, dict[str, list[float]]] = {
            label: {"take": [], "replan": [], "progress": [], "owners_view": [], "gauges": []} for label in sizes
        }
        for round_ in range(ROUNDS):
            for label in sizes:
                schema = f"growth_{label}"
                found[label]["take"] += takes(url, schema, TAKES, f"bench-{round_}")
                found[label]["replan"].append(replan(url, schema))
            # Sub-millisecond calls: the sizes take turns call by call, so that a busy moment hits both.
            for owner in owners:
                for label in sizes:
                    found[label]["progress"] += progress(url, f"growth_{label}", [owner], connected[label])
        # After the hot paths: the gauges read an entry of each of the 10,000 owners, which pushes the pages
        # the progress calls read out of a small shared_buffers (128 MB by default).
        for _ in range(ROUNDS * VIEW_CALLS):
            for label in sizes:
                owners_view, gauges = views(connected[label])
                found[label]["owners_view"].append(owners_view)
                found[label]["gauges"].append(gauges)
        for ops in connected.values():
            ops.close()
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    print(
        f"{'history':>12} {'take p50 ms':>12} {'take p95 ms':>12} {'replan s':>9} {'progress p50 ms':>16} "
        f"{'owners view p50 ms':>19} {'gauges p50 ms':>14}"
    )
    for label, rows in sizes.items():
        f = found[label]
        print(
            f"{rows:>12,} {statistics.median(f['take']) * 1e3:12.3f} {percentile(f['take'], 0.95) * 1e3:12.3f} "
            f"{min(f['replan']):9.3f} {statistics.median(f['progress']) * 1e3:16.3f} "
            f"{statistics.median(f['owners_view']) * 1e3:19.3f} {statistics.median(f['gauges']) * 1e3:14.3f}"
        )
    small, large = found["small"], found["large"]
    take_ratio = statistics.median(large["take"]) / statistics.median(small["take"])
    take_p95_ratio = percentile(large["take"], 0.95) / percentile(small["take"], 0.95)
    replan_ratio = min(large["replan"]) / min(small["replan"])
    progress_ratio = statistics.median(large["progress"]) / statistics.median(small["progress"])
    owners_view_ratio = statistics.median(large["owners_view"]) / statistics.median(small["owners_view"])
    gauges_ratio = statistics.median(large["gauges"]) / statistics.median(small["gauges"])
    print(
        f"take_ratio={take_ratio:.2f} take_p95_ratio={take_p95_ratio:.2f} replan_ratio={replan_ratio:.2f} "
        f"progress_ratio={progress_ratio:.2f} owners_view_ratio={owners_view_ratio:.2f} "
        f"gauges_ratio={gauges_ratio:.2f} small_rows={sizes['small']} large_rows={sizes['large']}"
    )


if __name__ == "__main__":
    main()
