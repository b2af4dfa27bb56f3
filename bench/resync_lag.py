"""The demo's freshness while a re-sync runs: a whole-history re-sync of one account beside its recurring sync.

Starts the demo's shop (its latency, its random 429s and 503s, acme's two requests a second) on a free port,
declares the demo against it (``synclane_demo.sync.build``, the demo's handlers and tables) with the orders
period shortened so that a re-sync spans several periods, loads every account's history with a WorkerPool of
the demo's three slots, and then, with the planner running every two seconds as the planning DAG would:

1. watches ``acme-us``'s orders freshness lag (now minus ``Operations.freshness``) for a while with no re-sync;
2. asks for a re-sync of ``acme-us``'s orders over the whole horizon (``Operations.resync``, 24 slices of 30
   days) and watches the same lag until the request is done.

Printed last: ``period_s``, ``resync_windows``, ``resync_s`` (from the request to its last window done),
``max_lag_periods_without`` (phase 1) and ``max_lag_periods_during`` (phase 2). Within a lane a due recurring
job goes before re-sync work, so the lag during the re-sync stays within two periods.

    .venv/bin/python bench/resync_lag.py               # orders every 10 s
    .venv/bin/python bench/resync_lag.py --every 20
"""

from __future__ import annotations

import argparse
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

from harness import database_url, drop_schema

from synclane_demo.settings import DemoSettings
from synclane_demo.shop.catalogue import Catalogue
from synclane_demo.shop.faults import Faults
from synclane_demo.shop.limits import Limits
from synclane_demo.shop.server import Shop, ShopServer
from synclane_demo.store import Store
from synclane_demo.sync import build
from synclane_provider.core import Operations, WorkerPool

QUEUE, OWNER, TYPE = "shops", "acme-us", "orders"


def lag_periods(operations: Operations, period: timedelta) -> float:
    fresh = operations.freshness(QUEUE, OWNER).get(TYPE)
    if fresh is None:
        return float("inf")
    return (datetime.now(timezone.utc) - fresh) / period


def watch(operations: Operations, period: timedelta, until, *, plan_every: float = 2.0) -> float:
    """Plan every ``plan_every`` seconds and read the lag every half second until ``until()``; the most seen."""
    worst, planned = 0.0, 0.0
    while not until():
        if time.monotonic() - planned >= plan_every:
            operations.plan(QUEUE)
            planned = time.monotonic()
        worst = max(worst, lag_periods(operations, period))
        time.sleep(0.5)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=float, default=10.0, help="the orders period in seconds (default 10)")
    parser.add_argument("--watch", type=float, default=40.0, help="seconds watched without a re-sync (default 40)")
    args = parser.parse_args()
    period = timedelta(seconds=args.every)

    url = database_url()
    suffix = uuid.uuid4().hex[:8]
    jobs_schema, data_schema = f"resync_lag_jobs_{suffix}", f"resync_lag_data_{suffix}"
    shop = ShopServer(("127.0.0.1", 0), Shop(Catalogue(), Faults(revoke_account=None), Limits())).start()
    try:
        settings = DemoSettings(
            database_url=url,
            shop_url=shop.url,
            schema=jobs_schema,
            data_schema=data_schema,
            orders_every=period,
            overlap=period / 5,
            max_lag=period * 20,
            retry_delay=timedelta(seconds=1),
            retry_max_delay=timedelta(seconds=5),
            poll_interval=timedelta(seconds=0.2),
        )
        synclane = build(settings)
        Store(url, data_schema).prepare()
        database = synclane.database(url)
        pool = WorkerPool(synclane, database, QUEUE, slots=settings.concurrency)
        executor = ThreadPoolExecutor(1, thread_name_prefix="pool")
        running = executor.submit(pool.run)  # its result() raises what the pool raised
        try:
            with Operations(synclane, database) as operations:
                started = time.monotonic()
                watch(operations, period, lambda: operations.progress(QUEUE, OWNER).complete)
                print(f"history of {OWNER} loaded in {time.monotonic() - started:.0f} s", flush=True)

                watched = time.monotonic()
                without = watch(operations, period, lambda: time.monotonic() - watched > args.watch)
                print(f"lag without a re-sync, {args.watch:.0f} s: at most {without:.2f} periods", flush=True)

                end = datetime.now(timezone.utc)
                request = operations.resync(
                    QUEUE, TYPE, end - settings.horizon, end, owners=[OWNER], reason="bench/resync_lag.py"
                )
                asked = time.monotonic()

                def request_done() -> bool:
                    [progress] = operations.resyncs(QUEUE, key=request.key)
                    return progress.done == progress.total

                during = watch(operations, period, request_done)
                took = time.monotonic() - asked
                print(
                    f"re-sync of {request.made} windows done in {took:.0f} s: lag at most {during:.2f} periods",
                    flush=True,
                )
        finally:
            pool.shutdown()
            running.result(60)
            executor.shutdown()
        print(
            f"period_s={args.every:g} resync_windows={request.made} resync_s={took:.1f} "
            f"max_lag_periods_without={without:.2f} max_lag_periods_during={during:.2f}"
        )
    finally:
        shop.stop()
        drop_schema(url, jobs_schema)
        drop_schema(url, data_schema)


if __name__ == "__main__":
    main()
