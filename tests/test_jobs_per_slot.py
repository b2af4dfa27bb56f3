"""One slot, many lanes: a slot runs up to ``jobs_per_slot`` jobs at once, each in a lane of its own, over a few
connections, with plain and ``async def`` handlers alike."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta

from synclane_provider.core import Operations, Owner, Page
from synclane_provider.core.errors import PageTimeout
from synclane_provider.core.run.multislot import MultiSlot
from synclane_provider.core.run.stepper import Stepper
from synclane_provider.core.run.waits import Wait
from tests.support.helpers import declare, owners, products, rows

LANES = [f"shop-{i:02}" for i in range(24)]


class Lanes:
    """Who is paging now, by lane: the most pages at once, and any lane seen twice at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.peak = 0
        self.overlaps = 0
        self.pages = 0

    def enter(self, lane: str) -> None:
        with self._lock:
            self.now[lane] = self.now.get(lane, 0) + 1
            self.overlaps += self.now[lane] > 1
            self.peak = max(self.peak, sum(self.now.values()))
            self.pages += 1

    def leave(self, lane: str) -> None:
        with self._lock:
            self.now[lane] -= 1


def enqueue_two_jobs_per_lane(synclane, database) -> None:
    with Operations(synclane, database) as ops:
        for owner in LANES:
            ops.enqueue("shops", owner, "products", key="a")
            ops.enqueue("shops", owner, "products", key="b")


def test_a_slot_of_many_jobs_runs_every_lane_at_once_and_never_two_jobs_of_one_lane(database_url, schema, admin):
    """24 lanes, two one-page jobs each, pages of 0.3 s: one slot of 24 jobs over 2 connections runs them about 24
    at a time, every job completed once, no lane paged twice at once."""
    seen = Lanes()

    def handler(job):
        seen.enter(job.lane)
        try:
            time.sleep(0.3)
        finally:
            seen.leave(job.lane)
        return Page(None, 1)

    synclane = declare(schema, products(handler), owner_source=owners(*LANES))
    database = synclane.database(database_url)
    enqueue_two_jobs_per_lane(synclane, database)
    started = time.monotonic()
    with MultiSlot(synclane, database, "shops", jobs_per_slot=24, connections=2) as slot:
        summary = slot.drain()
    took = time.monotonic() - started
    assert (summary.jobs, summary.outcomes["completed"], seen.pages, seen.overlaps) == (48, 48, 48, 0)
    assert seen.peak >= 12, seen.peak
    assert took < 48 * 0.3 / 4, took  # far from one page at a time
    assert {r["status"] for r in rows(admin, schema)} == {"completed"}
    assert database.traffic.connections <= 2 + 1  # the slot's two, and the schema check's


def test_an_async_handler_runs_every_lane_on_one_event_loop(database_url, schema, admin):
    """The same work with an ``async def`` handler: its pages wait together on one loop, on one thread."""
    seen = Lanes()
    loops: set[int] = set()
    threads: set[int] = set()

    async def handler(job):
        seen.enter(job.lane)
        loops.add(id(asyncio.get_running_loop()))
        threads.add(threading.get_ident())
        try:
            await asyncio.sleep(0.3)
        finally:
            seen.leave(job.lane)
        return Page(None, 1)

    synclane = declare(schema, products(handler), owner_source=owners(*LANES))
    database = synclane.database(database_url)
    enqueue_two_jobs_per_lane(synclane, database)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=24, connections=2) as slot:
        summary = slot.drain()
    assert (summary.jobs, summary.outcomes["completed"], seen.overlaps) == (48, 48, 0)
    assert seen.peak >= 12, seen.peak
    assert (len(loops), len(threads)) == (1, 1)


def test_a_page_that_hangs_holds_up_only_its_own_job(database_url, schema, admin):
    """One lane's page never returns within its 1 s timeout: that job fails with PageTimeout at its cursor, to be
    retried, while the other lanes' jobs complete around it; the hung page's thread is replaced."""
    release = threading.Event()

    def handler(job):
        if job.owner == "shop-00":
            release.wait(30)
        return Page(None, 1)

    synclane = declare(
        schema,
        products(handler, page_timeout=timedelta(seconds=1)),
        owner_source=owners(*LANES[:6]),
        retry_delay=timedelta(hours=1),
    )
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in LANES[:6]:
            ops.enqueue("shops", owner, "products", key="a")
    try:
        with MultiSlot(synclane, database, "shops", jobs_per_slot=6, connections=2) as slot:
            summary = slot.drain()
            assert slot.stepper.left_behind == 1
    finally:
        release.set()
    assert (summary.outcomes["completed"], summary.outcomes["failed"]) == (5, 1)
    [hung] = rows(admin, schema, "owner = %s", ["shop-00"])
    assert hung["status"] == "failed" and PageTimeout.__name__ in hung["error"]


def test_an_async_page_that_hangs_is_cancelled_at_its_timeout(database_url, schema, admin):
    cancelled = threading.Event()

    async def handler(job):
        if job.owner == "shop-00":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return Page(None, 1)

    synclane = declare(
        schema,
        products(handler, page_timeout=timedelta(seconds=1)),
        owner_source=owners(*LANES[:4]),
        retry_delay=timedelta(hours=1),
    )
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in LANES[:4]:
            ops.enqueue("shops", owner, "products", key="a")
    with MultiSlot(synclane, database, "shops", jobs_per_slot=4, connections=1) as slot:
        summary = slot.drain()
    assert (summary.outcomes["completed"], summary.outcomes["failed"]) == (3, 1)
    assert cancelled.wait(5)


def test_a_lane_two_wide_runs_two_of_its_jobs_at_once_in_one_slot(database_url, schema, admin):
    seen = Lanes()

    def handler(job):
        seen.enter(job.owner)
        time.sleep(0.3)
        seen.leave(job.owner)
        return Page(None, 1)

    synclane = declare(schema, products(handler), owner_source=owners(Owner("acme", lane_width=2)))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for key in "abcd":
            ops.enqueue("shops", "acme", "products", key=key)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=8, connections=2) as slot:
        summary = slot.drain()
    assert summary.outcomes["completed"] == 4
    assert seen.peak == 2


def test_a_work_started_takes_its_first_step_ahead_of_the_steps_already_waiting_for_a_step_thread():
    """When hundreds of pages end together, their finishes queue for the slot's few step threads. A job started
    then (a seat's next job, taken with its finish) takes its first step -- a moment's work before its page -- ahead
    of them: it waits for that backlog once, with its finish, not a second time to start."""
    stepper = Stepper(
        "test",
        logging.getLogger("test"),
        stop=threading.Event(),
        stop_grace=30,
        interrupted=threading.Event(),
        interrupt_grace=5,
        finish_grace=5,
        steps=1,
        pages=1,
    )
    order: list[str] = []
    first_steps_done, holding, release = threading.Event(), threading.Event(), threading.Event()

    def going_on(i: int):
        order.append(f"first {i}")
        if i == 2:
            first_steps_done.set()
        yield Wait(0.0)
        order.append(f"second {i}")

    def holding_the_step_thread():
        holding.set()
        release.wait(10)
        return
        yield

    def started():
        order.append("started")
        return
        yield

    for i in range(3):
        stepper.start(going_on(i), i)
    assert first_steps_done.wait(5)
    stepper.start(holding_the_step_thread(), "holder")
    assert holding.wait(5)
    stepper.pump(0.05)  # the three works' second steps queue behind the holder
    stepper.start(started(), "started")
    release.set()
    ended = []
    while len(ended) < 5:
        ended += stepper.pump(1.0)
    stepper.close()
    assert order == ["first 0", "first 1", "first 2", "started", "second 0", "second 1", "second 2"]
