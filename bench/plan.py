"""Planner scale: 10,000 owners, a windowed type (730-day horizon, 30-day slices, every 15 minutes) and a
snapshot type. Measures the first plan, a repeated plan that inserts nothing, and raising the horizon
from 60 to 730 days, each beside the best hand-written SQL for the same answer (the baseline) on the same
server in the same run: for the first plan and the raised horizon, one INSERT ... SELECT ... ON CONFLICT DO
NOTHING of the same rows; for the repeated plan, one set-based read of every owner's coverage that finds
nothing missing (re-running the insert would be a straw man: the planner only reads when nothing is due).
The repeated plan is the best of three runs on each side (all three are printed: the first one after a first
plan compares every owner with its coverage rows, the ones after it read only what is short).

    .venv/bin/python bench/plan.py            # 10,000 owners
    .venv/bin/python bench/plan.py --quick    # 2,000 owners
    .venv/bin/python bench/plan.py --owners 100000 --schema plan_100k   # keeps the schema; run again: only
                                                                        # the repeated plan, on the same table
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timedelta, timezone

import psycopg
from harness import database_url, drop_schema, schema_name
from psycopg import sql

from synclane_provider.core import Operations, Owner, Page, Queue, SnapshotType, SyncLane, WindowedType
from synclane_provider.core.schema import create_schema

NOW = datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def plan_declaration(schema: str, owners: list[Owner], horizon_days: int, slice_days: int = 30) -> SyncLane:
    """Queue ``shops``: ``owners``' orders in ``slice_days`` slices back ``horizon_days``, and a daily snapshot;
    the handlers do nothing (the planner is what is measured)."""

    def noop(job) -> Page:
        return Page(None, 0)

    return SyncLane(
        queues=[
            Queue(
                "shops",
                owners=lambda queue: owners,
                types=[
                    WindowedType(
                        "orders",
                        noop,
                        horizon=horizon_days * DAY,
                        slice=slice_days * DAY,
                        every=timedelta(minutes=15),
                        overlap=timedelta(minutes=5),
                    ),
                    SnapshotType("products", noop, every=DAY),
                ],
            )
        ],
        schema=schema,
    )


BASELINE = """
INSERT INTO {jobs} (queue, owner, lane, type, mode, priority, window_start, window_end, dedup_key, next_run_at, created_at)
SELECT 'shops', o.owner, o.owner, 'orders', 'initial', 0,
       greatest(%(anchor)s - (s + 1) * interval '30 days', %(anchor)s - %(horizon)s * interval '1 day'),
       %(anchor)s - s * interval '30 days',
       'initial:' || to_char(greatest(%(anchor)s - (s + 1) * interval '30 days', %(anchor)s - %(horizon)s * interval '1 day')
                             AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       %(now)s, %(now)s
FROM (SELECT 'owner-' || i AS owner FROM generate_series(1, %(owners)s) AS i) AS o
CROSS JOIN generate_series(0, ceil(%(horizon)s / 30.0)::int - 1) AS s
UNION ALL
SELECT 'shops', 'owner-' || i, 'owner-' || i, 'orders', 'recurring', 0, %(anchor)s - interval '5 minutes',
       %(period)s, 'recurring:' || to_char(%(period)s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), %(now)s, %(now)s
FROM generate_series(1, %(owners)s) AS i
UNION ALL
SELECT 'shops', 'owner-' || i, 'owner-' || i, 'products', 'initial', 1, NULL, NULL, 'initial', %(now)s, %(now)s
FROM generate_series(1, %(owners)s) AS i
ON CONFLICT (queue, owner, type, dedup_key) DO NOTHING
"""


BASELINE_REPLAN = """
WITH wanted AS (
    SELECT 'owner-' || i AS owner, t.type, t.horizon_start, t.period_start
    FROM generate_series(1, %(owners)s) AS i
    CROSS JOIN (VALUES ('orders', %(horizon_start)s::timestamptz, %(orders_period)s::timestamptz),
                       ('products', NULL::timestamptz, %(products_period)s::timestamptz))
         AS t(type, horizon_start, period_start)
),
existing AS (
    SELECT owner, type, bool_or(mode = 'initial') AS has_initial,
           min(window_start) FILTER (WHERE mode = 'initial') AS initial_start,
           max(window_end) AS covered_until, max(created_at) AS last_created_at
    FROM {jobs}
    WHERE queue = 'shops' AND mode <> 'manual'
    GROUP BY owner, type
)
SELECT w.owner, w.type
FROM wanted AS w
LEFT JOIN existing AS e ON e.owner = w.owner AND e.type = w.type
WHERE e.owner IS NULL OR NOT e.has_initial OR e.initial_start > w.horizon_start
   OR e.covered_until < w.period_start OR (e.covered_until IS NULL AND e.last_created_at < w.period_start)
"""
"""Which owner-types lack something, for every owner in one statement: what a repeated plan has to find out."""


def timed(action) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--owners", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="2,000 owners")
    parser.add_argument(
        "--schema",
        help="plan into this schema and keep it; when it holds a plan already (a run before with the same "
        "--owners), measure only the repeated plan and its baseline on it",
    )
    args = parser.parse_args()
    count = 2_000 if args.quick else args.owners
    owners = [Owner(f"owner-{i}") for i in range(1, count + 1)]
    url = database_url()
    schema, baseline_schema = args.schema or schema_name("plan"), schema_name("plan_baseline")

    with psycopg.connect(url, autocommit=True) as conn:
        prepared = (
            args.schema is not None
            and conn.execute("SELECT to_regclass(%s) IS NOT NULL", [f'"{args.schema}".jobs']).fetchone()[0]
        )
        if prepared:
            planned = conn.execute(
                sql.SQL("SELECT count(DISTINCT owner) FROM {}.jobs").format(sql.Identifier(schema))
            ).fetchone()[0]
            assert planned == count, f"schema {schema} holds a plan of {planned} owners, not {count}"
        for name in (baseline_schema,) if prepared else (schema, baseline_schema):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
            create_schema(conn, name)

    def baseline(horizon: int) -> float:
        params = {
            "anchor": datetime(2026, 11, 30, tzinfo=timezone.utc),
            "horizon": horizon,
            "now": NOW,
            "period": datetime(2026, 11, 30, 10, 15, tzinfo=timezone.utc),
            "owners": count,
        }
        with psycopg.connect(url, autocommit=True) as conn:
            statement = sql.SQL(BASELINE).format(jobs=sql.SQL("{}.jobs").format(sql.Identifier(baseline_schema)))
            seconds, _ = timed(lambda: conn.execute(statement, params))
        return seconds

    def baseline_replan() -> float:
        """The coverage read over the engine's own table (same rows, same vacuum), which must find nothing."""
        params = {
            "owners": count,
            "horizon_start": datetime(2026, 11, 30, tzinfo=timezone.utc) - 730 * DAY,
            "orders_period": datetime(2026, 11, 30, 10, 15, tzinfo=timezone.utc),
            "products_period": datetime(2026, 11, 30, tzinfo=timezone.utc),
        }
        with psycopg.connect(url, autocommit=True) as conn:
            statement = sql.SQL(BASELINE_REPLAN).format(jobs=sql.SQL("{}.jobs").format(sql.Identifier(schema)))
            seconds, cursor = timed(lambda: conn.execute(statement, params))
            missing = cursor.fetchall()
        assert not missing, f"the baseline read finds {len(missing)} owner-types missing where the planner found none"
        return seconds

    def plan(horizon: int):
        declaration = plan_declaration(schema, owners, horizon)
        with Operations(declaration, declaration.database(url)) as ops:
            ops.activity("shops")  # connect (and create the schema) outside the timing
            return timed(lambda: ops.plan("shops", now=NOW))

    rows = []
    if not prepared:
        first_s, first = plan(730)
        baseline_s = baseline(730)
        rows.append(("first plan, 730 days", first_s, first.total, baseline_s))
    # The steady state of a planner that runs every minute: autovacuum has seen the inserts by then.
    with psycopg.connect(url, autocommit=True) as conn:
        for name in (schema,) if prepared else (schema, baseline_schema):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(name)))
    replans = [plan(730) for _ in range(3)]
    replan_s, replan = min(replans, key=lambda timing: timing[0])
    baseline_replan_s = min(baseline_replan() for _ in range(3))
    rows.append(("repeated plan", replan_s, replan.total, baseline_replan_s))
    replans_text = ",".join(f"{seconds:.3f}" for seconds, _ in replans)
    if prepared:
        print(f"{'step':<24} {'owners':>7} {'inserted':>9} {'engine s':>9} {'baseline s':>11} {'ratio':>6}")
        print(
            f"{'repeated plan':<24} {count:>7} {replan.total:>9} {replan_s:9.3f} {baseline_replan_s:11.3f} "
            f"{replan_s / baseline_replan_s:6.2f}"
        )
        drop_schema(url, baseline_schema)
        print(
            f"replan_s={replan_s:.3f} replans_s={replans_text} baseline_replan_s={baseline_replan_s:.3f} "
            f"replan_ratio={replan_s / baseline_replan_s:.2f} owners={count} schema={schema}"
        )
        return

    with psycopg.connect(url, autocommit=True) as conn:
        for name in (schema, baseline_schema):
            conn.execute(sql.SQL("TRUNCATE {0}.jobs, {0}.coverage").format(sql.Identifier(name)))
    plan(60)
    baseline(60)
    raise_s, raised = plan(730)
    baseline_raise_s = baseline(730)
    rows.append(("horizon 60 -> 730 days", raise_s, raised.total, baseline_raise_s))

    print(f"{'step':<24} {'owners':>7} {'inserted':>9} {'engine s':>9} {'baseline s':>11} {'ratio':>6}")
    for label, seconds, inserted, base in rows:
        print(f"{label:<24} {count:>7} {inserted:>9} {seconds:9.3f} {base:11.3f} {seconds / base:6.2f}")
    if args.schema is None:
        drop_schema(url, schema)
    drop_schema(url, baseline_schema)
    print(
        f"first_plan_s={first_s:.3f} baseline_s={baseline_s:.3f} replan_s={replan_s:.3f} replans_s={replans_text} "
        f"baseline_replan_s={baseline_replan_s:.3f} replan_ratio={replan_s / baseline_replan_s:.2f} "
        f"raise_horizon_s={raise_s:.3f} raise_horizon_ratio={raise_s / baseline_raise_s:.2f} "
        f"first_plan_ratio={first_s / baseline_s:.2f} owners={count}"
    )


if __name__ == "__main__":
    main()
