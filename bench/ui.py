"""The operator's views at size: 1,000,000 jobs of 10,000 owners (5,000 lanes), every endpoint of the SyncLane
page and every ``airflow synclane`` listing timed, the slowest p95 last.

    .venv/bin/python bench/ui.py            # 1,000,000 jobs, 10,000 owners, 30 calls per endpoint
    .venv/bin/python bench/ui.py --quick    # 200,000 jobs, 2,000 owners, 10 calls (under two minutes)
    .venv/bin/python bench/ui.py --quick --per-owner 1000   # a longer history: 2,000,000 jobs

The table is filled with one set-based INSERT: per owner one product snapshot and daily order windows, the
oldest 94 of them the initial load and the rest recurring, almost all completed (spread over 30 days, so
about 1/720 of them in the last hour), the newest pending, one running job in every tenth lane, and a few
failed, deferred and abandoned ones; then VACUUM ANALYZE, as autovacuum would. Endpoints are called through
the page's FastAPI app in this process (Airflow's authentication left out: it costs the same whatever the
table holds); listings through the commands' functions, each opening its connection as the command does,
printing ``--output plain``; and what each planning run adds, the health check and the queue's gauges
(``health_check``, ``health_gauges``). Last line: ``key=value`` pairs ending in ``p95_ms_max=``, the slowest
endpoint's or listing's p95 (goal: under 200).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time
from argparse import Namespace
from datetime import datetime, timedelta, timezone

import psycopg
from harness import ROOT, database_url, drop_schema, schema_name
from psycopg import sql

SCHEMA = os.environ.get("SYNCLANE_BENCH_UI_SCHEMA") or schema_name("ui")
os.environ["SYNCLANE_BENCH_UI_SCHEMA"] = SCHEMA

from synclane_provider.core import Owner, Page, Queue, SnapshotType, SyncLane, WindowedType  # noqa: E402


def _noop(job) -> Page:
    return Page(None, 0)


OWNERS = int(os.environ.get("SYNCLANE_BENCH_UI_OWNERS", "10000"))
DECLARATION = SyncLane(
    queues=[
        Queue(
            "shops",
            owners=lambda queue: [Owner(f"owner-{i:05d}", lane=f"lane-{i // 2:05d}") for i in range(OWNERS)],
            types=[
                WindowedType(
                    "orders", _noop, horizon=timedelta(days=365), slice=timedelta(days=1), every=timedelta(minutes=15)
                ),
                SnapshotType("products", _noop, every=timedelta(days=1)),
            ],
            max_lag=timedelta(hours=1),
        )
    ],
    schema=SCHEMA,
)

FILL = """
INSERT INTO {jobs} (queue, owner, lane, type, mode, status, priority, window_start, window_end, dedup_key, cursor,
                    processed_count, attempt_count, error, next_run_at, leased_by, lease_expires_at, created_at,
                    started_at, heartbeat_at, completed_at)
SELECT 'shops', 'owner-' || lpad(o::text, 5, '0'), 'lane-' || lpad((o / 2)::text, 5, '0'),
       CASE WHEN j = 0 THEN 'products' ELSE 'orders' END,
       CASE WHEN j < least(%(per)s - 5, 95) THEN 'initial' ELSE 'recurring' END,
       s.status, CASE WHEN j = 0 THEN 1 ELSE 0 END,
       CASE WHEN j > 0 THEN date_trunc('day', now()) - (%(per)s - j) * interval '1 day' END,
       CASE WHEN j > 0 THEN date_trunc('day', now()) - (%(per)s - j - 1) * interval '1 day' END,
       CASE WHEN j = 0 THEN 'initial' ELSE 'day:' || j END,
       CASE WHEN s.status IN ('running', 'abandoned', 'failed') THEN '50' END,
       (o + j) %% 500, CASE WHEN s.status = 'completed' THEN 1 ELSE 3 END,
       CASE WHEN s.status IN ('abandoned', 'failed', 'deferred') THEN 'ShopError: page 50 answers 500' END,
       now() - (o %% 60) * interval '1 minute',
       CASE WHEN s.status = 'running' THEN 'worker-' || (o %% 8) END,
       CASE WHEN s.status = 'running' THEN now() + interval '5 minutes' END,
       now() - interval '30 days',
       CASE WHEN s.status <> 'pending' THEN now() - interval '31 days' END,
       CASE WHEN s.status = 'running' THEN now() - (o %% 30) * interval '1 second' END,
       CASE WHEN s.status = 'completed' THEN now() - ((o * %(per)s + j) %% 43200) * interval '1 minute' END
FROM generate_series(0, %(owners)s - 1) AS o
CROSS JOIN generate_series(0, %(per)s - 1) AS j
CROSS JOIN LATERAL (SELECT CASE
    WHEN j = %(per)s - 1 THEN 'pending'
    WHEN j = %(per)s - 2 AND o %% 20 = 0 THEN 'running'
    WHEN j = 3 AND o %% 97 = 0 THEN 'abandoned'
    WHEN j = 4 AND o %% 53 = 0 THEN 'failed'
    WHEN j = 5 AND o %% 211 = 0 THEN 'deferred'
    ELSE 'completed' END AS status) AS s
"""


def fill(url: str, *, owners: int, per_owner: int) -> float:
    from synclane_provider.core.schema import create_schema

    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        create_schema(conn, SCHEMA)
        jobs = sql.SQL("{}.jobs").format(sql.Identifier(SCHEMA))
        conn.execute(sql.SQL(FILL).format(jobs=jobs), {"owners": owners, "per": per_owner})
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
    return time.monotonic() - started


def timed(call, repeat: int) -> list[float]:
    call()  # the first call opens connections and warms caches; what an operator sees is the steady state
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20, method="inclusive")[-1] if len(times) > 1 else times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 jobs of 2,000 owners, 10 calls each")
    parser.add_argument("--keep", action="store_true", help="leave the schema in place afterwards")
    parser.add_argument(
        "--per-owner", type=int, default=100, help="jobs per owner (a longer history: 1000 is 3 days of 5-minute jobs)"
    )
    args = parser.parse_args()
    global OWNERS
    owners, per_owner, repeat = (2_000, args.per_owner, 10) if args.quick else (OWNERS, args.per_owner, 30)
    OWNERS = owners  # what the declaration's owner source lists
    url = database_url()
    from synclane_demo.local import airflow_connection

    os.environ.update(
        {
            "AIRFLOW_CONN_SYNCLANE_DEFAULT": airflow_connection(url),
            "AIRFLOW__SYNCLANE__DECLARATION": "ui:DECLARATION",
        }
    )
    sys.modules.setdefault("ui", sys.modules[__name__])
    try:
        fill_s = fill(url, owners=owners, per_owner=per_owner)
        results = measure(repeat, owners, per_owner)
        planning_run = measure_planning_run(repeat)
    finally:
        if not args.keep:
            drop_schema(url, SCHEMA)
    slowest = max(results.values())
    fields = {
        "rows": owners * per_owner,
        "owners": owners,
        "calls": repeat,
        "fill_s": f"{fill_s:.1f}",
        **{f"p95_ms_{name}": f"{value:.1f}" for name, value in {**results, **planning_run}.items()},
        "p95_ms_max": f"{slowest:.1f}",
    }
    print(" ".join(f"{key}={value}" for key, value in fields.items()))


def measure(repeat: int, owners: int, per_owner: int) -> dict[str, float]:
    from fastapi.testclient import TestClient

    from synclane_provider.cli import commands
    from synclane_provider.plugins.app import create_app

    allow = lambda: None  # noqa: E731 - Airflow's authentication is left out (see the module docstring)
    from fastapi import Depends

    client = TestClient(create_app(read_access=lambda: Depends(allow), edit_access=lambda: Depends(allow)))
    middle_owner = f"owner-{owners // 2:05d}"
    middle_lane = f"lane-{owners // 4:05d}"
    with psycopg.connect(database_url()) as conn:
        newest = conn.execute(sql.SQL("SELECT max(id) FROM {}.jobs").format(sql.Identifier(SCHEMA))).fetchone()[0]
    endpoints = {
        "queues": "api/queues",
        "lanes": "api/queues/shops/lanes",
        "lanes_page": f"api/queues/shops/lanes?after={middle_lane}",
        "owners": "api/queues/shops/owners",
        "owners_page": f"api/queues/shops/owners?after={middle_owner}",
        "owners_troubled": "api/queues/shops/owners?troubled=true",
        "owner_one": f"api/queues/shops/owners?owner={middle_owner}",
        "progress": f"api/queues/shops/owners/{middle_owner}/progress",
        "jobs": "api/queues/shops/jobs",
        "jobs_deep": f"api/queues/shops/jobs?before={newest // 2}",
        "jobs_owner": f"api/queues/shops/jobs?owner={middle_owner}",
        "jobs_abandoned": "api/queues/shops/jobs?status=abandoned",
        "jobs_running": "api/queues/shops/jobs?status=running",
        "jobs_completed": "api/queues/shops/jobs?status=completed&type=orders",
        "jobs_recurring": "api/queues/shops/jobs?mode=recurring&type=orders",
        "jobs_manual": "api/queues/shops/jobs?mode=manual",
        "job": f"api/jobs/{newest // 2}",
    }
    results: dict[str, float] = {}
    for name, path in endpoints.items():

        def call(path: str = path) -> None:
            response = client.get("/" + path)
            assert response.status_code == 200, (path, response.status_code, response.text[:300])

        results[name] = p95(timed(call, repeat))
    # plain: Airflow prints json and yaml through rich's syntax highlighting, which costs more than the query
    base = dict(conn_id=None, declaration=None, output="plain", verbose=False, queue=None, limit=50, after=None)
    listings = {
        "cli_queues": (commands.queues_command, {}),
        "cli_jobs": (commands.jobs_command, dict(owner=None, type=None, status="abandoned", mode=None, before=None)),
        "cli_lanes": (commands.lanes_command, {}),
        "cli_progress": (commands.progress_command, dict(owner=None, type=None, troubled=False)),
        "cli_progress_owner": (commands.progress_command, dict(owner=middle_owner, type=None, troubled=False)),
    }
    for name, (command, extra) in listings.items():
        arguments = Namespace(**{**base, **extra})

        def run(command=command, arguments=arguments) -> None:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                command(arguments)

        results[name] = p95(timed(run, repeat))
    return results


def measure_planning_run(repeat: int) -> dict[str, float]:
    """What every planning run adds: the health check (abandoned in its 5-minute interval, stuck, lagging owners
    against max_lag) and the queue's gauges, on one connection as the operators hold one."""
    from synclane_provider.core import Operations

    with Operations(DECLARATION, DECLARATION.database(database_url())) as operations:
        since = datetime.now(timezone.utc) - timedelta(minutes=5)
        return {
            "health_check": p95(timed(lambda: operations.check_health("shops", abandoned_since=since), repeat)),
            "health_gauges": p95(timed(lambda: operations.gauges("shops"), repeat)),
        }


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
