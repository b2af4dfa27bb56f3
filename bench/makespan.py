"""Makespan: how close the workers come to the best possible wall time.

N owners over M lanes, history slices of a few pages each whose handler sleeps a fixed latency per page
(an API call), C worker slots. Owner i has (i % 5) + 1 slices, newest first as the planner makes them,
so lanes carry unequal work. No schedule can beat max(the longest lane's total work, total work / C);
the efficiency is that bound divided by the wall time the engine achieved.

    .venv/bin/python bench/makespan.py            # 40 owners, 8 lanes, 4 slots, 50 ms pages
    .venv/bin/python bench/makespan.py --quick    # 16 owners, 8 lanes, 4 slots, 50 ms pages
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
from harness import database_url, drop_schema, schema_name
from psycopg import sql

from synclane_provider.core import Job, Operations, Page, Queue, SyncLane, WindowedType, WorkerPool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--owners", type=int, default=40)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--pages", type=int, default=3, help="pages per job")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per page")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.owners = 16

    def handler(job: Job) -> Page:
        time.sleep(args.latency)
        done = int(job.cursor or 0) + 1
        return Page(None if done >= args.pages else str(done), 1)

    url = database_url()
    schema = schema_name("makespan")
    declaration = SyncLane(
        queues=[
            Queue(
                "makespan",
                owners=lambda q: [],
                types=[
                    WindowedType(
                        "work", handler, horizon=timedelta(days=150), slice=timedelta(days=30), every=timedelta(days=1)
                    )
                ],
            )
        ],
        schema=schema,
    )
    database = declaration.database(url)
    with Operations(declaration, database) as ops:
        ops.activity("makespan")  # creates the schema
    # Owner i has (i % 5) + 1 thirty-day slices back from today; owners are spread round-robin over the lanes.
    today = datetime(2026, 11, 30, tzinfo=timezone.utc)
    jobs = [(f"owner-{i}", f"lane-{i % args.lanes}", n) for i in range(args.owners) for n in range(i % 5 + 1)]
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor().copy(
            sql.SQL(
                "COPY {}.jobs (queue, owner, lane, type, mode, window_start, window_end, dedup_key) FROM STDIN"
            ).format(sql.Identifier(schema))
        ) as copy:
            for owner, lane_name, n in jobs:
                end = today - n * timedelta(days=30)
                copy.write_row(
                    ("makespan", owner, lane_name, "work", "initial", end - timedelta(days=30), end, f"initial:{n}")
                )

    per_job = args.pages * args.latency
    lane_work: dict[str, float] = defaultdict(float)
    for _, lane_name, _ in jobs:
        lane_work[lane_name] += per_job
    total = per_job * len(jobs)
    bound = max(max(lane_work.values()), total / args.slots)

    pool = WorkerPool(declaration, database, "makespan", slots=args.slots, poll_interval=timedelta(milliseconds=200))
    started = time.perf_counter()
    summary = pool.drain()
    achieved = time.perf_counter() - started
    pool.close()
    drop_schema(url, schema)

    efficiency = bound / achieved
    print(
        f"{'owners':>6} {'lanes':>5} {'slots':>5} {'jobs':>5} {'work s':>7} {'longest lane s':>14} {'bound s':>7} "
        f"{'achieved s':>10} {'efficiency':>10}"
    )
    print(
        f"{args.owners:>6} {args.lanes:>5} {args.slots:>5} {summary.jobs:>5} {total:7.2f} {max(lane_work.values()):14.2f} "
        f"{bound:7.2f} {achieved:10.2f} {efficiency:10.1%}"
    )
    print(f"efficiency={efficiency:.3f} bound_s={bound:.3f} achieved_s={achieved:.3f} jobs={summary.jobs}")


if __name__ == "__main__":
    main()
