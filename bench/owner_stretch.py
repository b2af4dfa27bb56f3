"""What an owner whose access is gone costs in API calls over a simulated day, with and without the owner stretch.

One queue, a 5-minute `orders` type, the default retry policy (5 attempts, 1 minute doubling, seeded jitter):
an owner whose every page fails (access revoked), 50 healthy owners beside it, and one healthy owner paused by
``Operations.pause`` for six hours of the day. The clock is pinned and moved a minute at a time through the
day; each minute the planner runs and a real WorkerPool drains what is due, against a real PostgreSQL. The
handler counts the calls each owner costs. The day is run twice: ``Queue(owner_stretch=None)`` (every owner at
its period: the failing one gets a new window, and its attempts, every period) and the default backoff.

Printed last: ``calls_failing_owner_plain`` and ``calls_failing_owner_backoff`` (the failing owner's calls in
the day), their ``ratio``, ``calls_while_paused`` (the paused owner's calls while paused, in both runs) and
``healthy_max_lag_periods`` (the most any healthy owner's newest completed window fell behind the clock,
looked at after each minute's drain, in periods, in the backoff run).

    .venv/bin/python bench/owner_stretch.py --quick   # one day, 2 worker slots
    .venv/bin/python bench/owner_stretch.py           # three days, 4 worker slots
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg
from harness import database_url, drop_schema, schema_name
from psycopg import sql

from synclane_provider.core import (
    Job,
    Operations,
    Owner,
    OwnerStretch,
    Page,
    PinnedClock,
    Queue,
    RetryPolicy,
    SyncLane,
    WindowedType,
    WorkerPool,
)

EVERY = timedelta(minutes=5)
STEP = timedelta(minutes=1)
START = datetime(2026, 11, 30, 0, 0, 30, tzinfo=timezone.utc)
FAILING = "revoked"
PAUSED = "paused"
PAUSE = (timedelta(hours=6), timedelta(hours=12))  # from, to: after the day's start
QUEUE = "owners"


class CountingShop:
    """The API: counts every call per owner; the failing owner's calls raise, every other returns one page."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> Page:
        with self._lock:
            self.calls[job.owner] += 1
        if job.owner == FAILING:
            raise PermissionError("401 access revoked")
        return Page(None, 1)


@dataclass(frozen=True)
class Day:
    calls_failing: int
    calls_while_paused: int
    healthy_max_lag: timedelta
    seconds: float


def simulate(url: str, schema: str, *, healthy: int, days: int, slots: int, backoff: OwnerStretch | None) -> Day:
    shop = CountingShop()
    accounts = [Owner(FAILING), Owner(PAUSED), *(Owner(f"healthy-{i:03d}") for i in range(healthy))]
    orders = WindowedType("orders", shop, horizon=timedelta(days=1), slice=timedelta(days=1), every=EVERY)
    declaration = SyncLane(
        queues=[
            Queue(
                QUEUE,
                owners=lambda queue: accounts,
                types=[orders],
                concurrency=slots,
                retry=RetryPolicy(seed=7),
                owner_stretch=backoff,
            )
        ],
        schema=schema,
    )
    database = declaration.database(url)
    clock = PinnedClock(START)
    paused_calls, worst = 0, timedelta(0)
    started = time.perf_counter()
    with Operations(declaration, database, clock=clock) as ops, psycopg.connect(url, autocommit=True) as look:
        newest = sql.SQL(
            "SELECT min(reach) FROM (SELECT max(window_end) AS reach FROM {}.jobs "
            "WHERE status = 'completed' AND owner LIKE 'healthy-%%' GROUP BY owner) AS owners"
        ).format(sql.Identifier(schema))
        while clock.now < START + days * timedelta(days=1):
            since = clock.now - START
            if since == PAUSE[0]:
                ops.pause(QUEUE, PAUSED, "the benchmark pauses it")
                before = shop.calls[PAUSED]
            if since == PAUSE[1]:
                paused_calls += shop.calls[PAUSED] - before
                ops.resume(QUEUE, PAUSED)
            ops.plan(QUEUE)
            with WorkerPool(declaration, database, QUEUE, slots=slots, clock=clock) as pool:
                pool.drain()
            row = look.execute(newest).fetchone()
            if row is not None and row[0] is not None and since >= EVERY:
                worst = max(worst, clock.now - row[0])
            clock.advance(STEP)
    return Day(shop.calls[FAILING], paused_calls, worst, time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--healthy", type=int, default=50, help="healthy owners beside the failing one")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.days, args.slots = 1, 2
    url = database_url()
    runs = {}
    print(f"{'owner backoff':<14} {'days':>4} {'failing calls':>13} {'paused calls':>12} {'healthy lag':>11} {'s':>7}")
    for label, backoff in (("plain", None), ("backoff", OwnerStretch())):
        schema = schema_name(f"owner_backoff_{label}")
        try:
            day = simulate(url, schema, healthy=args.healthy, days=args.days, slots=args.slots, backoff=backoff)
        finally:
            drop_schema(url, schema)
        runs[label] = day
        print(
            f"{label:<14} {args.days:>4} {day.calls_failing:>13} {day.calls_while_paused:>12} "
            f"{day.healthy_max_lag / EVERY:>11.2f} {day.seconds:7.1f}"
        )
    plain, backed_off = runs["plain"], runs["backoff"]
    print(
        f"calls_failing_owner_plain={plain.calls_failing} calls_failing_owner_backoff={backed_off.calls_failing} "
        f"ratio={plain.calls_failing / max(backed_off.calls_failing, 1):.1f} "
        f"calls_while_paused={plain.calls_while_paused + backed_off.calls_while_paused} "
        f"healthy_max_lag_periods={backed_off.healthy_max_lag / EVERY:.2f}"
    )


if __name__ == "__main__":
    main()
