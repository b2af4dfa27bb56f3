"""The declaration the provider tests (and the example DAGs, under test) work, imported by path like users' own.

Queue ``shops``: four shops over three lanes (``acme-us`` and ``acme-eu``
share ``acme``), orders in 30-day slices and a product snapshot, pages with a
short latency; ``globex`` products are throttled on their first attempt, so a
worker has to wait for a job that becomes due a moment later. Every page
records when it ran in which lane, so tests can check that lanes never ran
two jobs at once.

Queue ``slow``: one owner whose pages the tests can hold in flight (``GATE``)
or slow down, to stop a worker in the middle of a job.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from synclane_provider.core import (
    Jitter,
    Job,
    JobThrottled,
    Owner,
    Page,
    Queue,
    RetryPolicy,
    SnapshotType,
    SyncLane,
    WindowedType,
)

PAGE_SIZE = 50
RECORDS = 100
LATENCY = 0.02
THROTTLED_OWNER = "globex"
THROTTLE_SECONDS = 2.0


@dataclass(frozen=True)
class PageRun:
    lane: str
    job_id: int
    started: float
    ended: float


PAGES: list[PageRun] = []
_pages_lock = threading.Lock()

IN_FLIGHT = threading.Event()
"""Set by the ``slow`` queue's handler when its second page starts."""
GATE = threading.Event()
"""The ``slow`` queue's second page waits for this (at most 30 s)."""
ON_SECOND_PAGE: list[Callable[[], None]] = []
"""Called by the ``slow`` queue's handler at the start of its second page (e.g. to send SIGTERM)."""
SLOW_PAGE_SECONDS = 0.0
"""Extra time each ``slow`` page takes."""


def reset() -> None:
    global SLOW_PAGE_SECONDS
    with _pages_lock:
        PAGES.clear()
    IN_FLIGHT.clear()
    GATE.set()
    ON_SECOND_PAGE.clear()
    SLOW_PAGE_SECONDS = 0.0


def overlapping_lane_pages() -> list[tuple[PageRun, PageRun]]:
    """Pairs of pages of different jobs of one lane whose run times overlap (the lane invariant says: none)."""
    with _pages_lock:
        runs = sorted(PAGES, key=lambda run: (run.lane, run.started))
    return [
        (a, b)
        for i, a in enumerate(runs)
        for b in runs[i + 1 :]
        if a.lane == b.lane and a.job_id != b.job_id and b.started < a.ended
    ]


def _page(job: Job, total: int = RECORDS) -> Page:
    started = time.monotonic()
    time.sleep(LATENCY)
    offset = int(job.cursor or 0)
    following = offset + PAGE_SIZE
    with _pages_lock:
        PAGES.append(PageRun(job.lane, job.id, started, time.monotonic()))
    return Page(str(following) if following < total else None, PAGE_SIZE)


def orders(job: Job) -> Page:
    return _page(job)


def products(job: Job) -> Page:
    """Throttled on the first attempt for one owner: the job becomes due again THROTTLE_SECONDS later."""
    if job.owner == THROTTLED_OWNER and job.attempt_count == 1:
        raise JobThrottled("429 Too Many Requests", retry_after=THROTTLE_SECONDS)
    return _page(job)


OWNER_SOURCE_FAILURES: list[Exception] = []
"""What the owner source raises, one per call, before it answers (a database of accounts that went away)."""


def shops(queue: str) -> list[Owner]:
    if OWNER_SOURCE_FAILURES:
        raise OWNER_SOURCE_FAILURES.pop(0)
    return [Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"), Owner("globex"), Owner("initech")]


def slow_export(job: Job) -> Page:
    """500 records, 50 a page; the second page can be held in flight by the test."""
    if job.cursor == "50":
        IN_FLIGHT.set()
        for call in ON_SECOND_PAGE:
            call()
        GATE.wait(30)
    time.sleep(SLOW_PAGE_SECONDS)
    return _page(job, total=500)


ORDERS = WindowedType(
    "orders", orders, horizon=timedelta(days=60), slice=timedelta(days=30), every=timedelta(minutes=15)
)


def orders_per_owner(at: datetime | None = None) -> int:
    """Order jobs a first plan at ``at`` (now by default) gives an owner: two 30-day slices, and the recurring
    window once the first 15-minute period of the day (UTC) has passed -- before that, the newest slice ends
    at midnight. A test whose plan ran a while before it counts names the moment (see :func:`planned_between`)."""
    now = at or datetime.now(timezone.utc)
    return 2 + (now - now.replace(hour=0, minute=0, second=0, microsecond=0) >= ORDERS.every)


def shop_jobs(at: datetime | None = None) -> int:
    """Jobs a first plan at ``at`` (now by default) gives the queue ``shops``: four owners' orders and one
    product snapshot each."""
    return 4 * (orders_per_owner(at) + 1)


def planned_between(start: datetime, end: datetime) -> set[int]:
    """What :func:`shop_jobs` may be for a plan that ran between ``start`` and ``end``: one figure, or two when
    the first period of a day ended in between (a run at 00:14:58 UTC plans one recurring window fewer than
    the same run at 00:15:00)."""
    return {shop_jobs(start), shop_jobs(end)}


synclane = SyncLane(
    queues=[
        Queue(
            "shops",
            owners=shops,
            types=[
                ORDERS,
                SnapshotType("products", products, every=timedelta(days=1)),
            ],
            concurrency=2,
            max_lag=timedelta(hours=1),
            # Un-jittered, so a failed attempt waits the full minute: no test run is short enough to retry it.
            retry=RetryPolicy(jitter=Jitter.NONE),
        ),
        Queue(
            "slow",
            owners=lambda queue: ["hooli"],
            types=[SnapshotType("export", slow_export, every=timedelta(days=1))],
            retention=timedelta(days=30),
        ),
    ],
    schema=os.environ["SYNCLANE_TEST_SCHEMA"],
    poll_interval=timedelta(seconds=1),
)
