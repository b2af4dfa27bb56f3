"""Lock order of ``finish_and_take``: deadlocks and throughput with the finish written first (shipped) or last.

A worker's ``finish_and_take`` writes its last job's end and leases its next one in one statement. Left to
the planner, the finish ran last: it was referenced only by the lane check of a lane that had a job running,
so for a take in a free lane it ran after the take had already put its new job in ``jobs_one_running_per_lane``.
If another worker's take had meanwhile locked the finished row (a take whose snapshot still showed that row
as waiting locks it before rechecking it, and keeps that lock), the finish waited for that take while that
take waited on the lane index for the finisher: a deadlock, broken by PostgreSQL after ``deadlock_timeout``
(1 s) and retried. The shipped statement runs the finish before anything is taken (an init plan gates each
way of taking), so a finisher that waits holds nothing another take can wait for.

This benchmark runs both orders side by side on a private cluster (stock settings, nothing else on it, so its
server log and ``pg_stat_database.deadlocks`` count only these runs), in alternating rounds, best round each:

    .venv/bin/python bench/lock_order.py                 # 8x100, 24x3, 24x100; 3 rounds of 5 s
    .venv/bin/python bench/lock_order.py --rounds 5 --cells 24x100

Last line: ``ratio_8x100=… ratio_24x3=…`` (finish-first jobs/s over finish-last, goal ≥ 0.95) and the
deadlocks of each order.
"""

from __future__ import annotations

import argparse
import time

import psycopg
from harness import Load, drop_schema, fresh_jobs_table, run_baseline, run_engine
from soak_cluster import PrivateCluster

from synclane_provider.core.db import queries

GUARD = " AND (SELECT n FROM finish_first) >= 0"
STOCK = {"shared_buffers": "128MB", "max_connections": "100", "fsync": "on"}


def install(schema: str, text: str) -> None:
    """Make ``finish_and_take`` read ``text`` for ``schema`` (statements are cached per schema)."""
    texts = queries._texts()
    shipped = texts["finish_and_take"]
    texts["finish_and_take"] = text
    try:
        queries.statement("finish_and_take", schema)
    finally:
        texts["finish_and_take"] = shipped


def deadlocks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        (count,) = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", default="8x100,24x3,24x100", help="workers x lanes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--pages", type=int, default=1, help="no-op pages a job (a cursor save between each)")
    parser.add_argument(
        "--loop",
        choices=["engine", "baseline"],
        default="engine",
        help="the engine's WorkerPool, or the minimal psycopg loop sending the same statements",
    )
    args = parser.parse_args()
    shipped = queries._texts()["finish_and_take"]
    assert GUARD in shipped, "the shipped statement no longer gates its takes on the finish"
    orders = {"finish_first": shipped, "finish_last": shipped.replace(GUARD, "")}
    figures: dict[str, float] = {}
    print(
        f"{'workers':>7} {'lanes':>5} {'order':>12} | {'best j/s':>8} {'all rounds j/s':>24} | {'wasted':>6} | "
        f"{'deadlocks':>9}"
    )
    with PrivateCluster(settings=STOCK) as cluster:
        url = cluster.url
        for schema, text in orders.items():
            install(f"lock_{schema}", text)
        for cell in args.cells.split(","):
            workers, lanes = (int(part) for part in cell.split("x"))
            rates: dict[str, list[float]] = {order: [] for order in orders}
            locked: dict[str, int] = dict.fromkeys(orders, 0)
            wasted: dict[str, list[float]] = {order: [] for order in orders}
            for round_number in range(args.rounds):
                sequence = list(orders) if round_number % 2 == 0 else list(reversed(orders))
                for order in sequence:
                    schema = f"lock_{order}"
                    fresh_jobs_table(url, schema, jobs=args.jobs, lanes=lanes)
                    before = deadlocks(url)
                    loop = run_engine if args.loop == "engine" else run_baseline
                    run = loop(url, schema, Load(workers=workers, pages=args.pages, seconds=args.seconds))
                    time.sleep(1.2)  # closed sessions have flushed their statistics
                    locked[order] += deadlocks(url) - before
                    rates[order].append(run.jobs_per_s)
                    wasted[order].append(run.wasted_share)
                    drop_schema(url, schema)
            for order in orders:
                rounds_text = " ".join(f"{rate:.0f}" for rate in rates[order])
                share = sum(wasted[order]) / len(wasted[order])
                print(
                    f"{workers:>7} {lanes:>5} {order:>12} | {max(rates[order]):8.0f} {rounds_text:>24} | "
                    f"{share:6.1%} | {locked[order]:>9}",
                    flush=True,
                )
                figures[f"deadlocks_{order}_{cell}"] = locked[order]
            figures[f"ratio_{cell}"] = max(rates["finish_first"]) / max(rates["finish_last"])
        logged = cluster.count_in_log("deadlock detected")
    figures["deadlocks_in_server_log"] = logged
    ratios = [key for key in figures if key.startswith("ratio_")]
    print(
        " ".join(
            f"{key}={figures[key]:.3f}" if key in ratios else f"{key}={figures[key]:.0f}"
            for key in ratios + [k for k in figures if k not in ratios]
        )
    )


if __name__ == "__main__":
    main()
