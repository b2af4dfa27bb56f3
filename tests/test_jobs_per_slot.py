"""One slot, many lanes: a slot runs up to ``jobs_per_slot`` jobs at once, each in a lane of its own, over a few
connections, with plain and ``async def`` handlers alike."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import httpx
import pytest

from synclane_provider.core import Operations, Owner, Page
from synclane_provider.core.errors import PageTimeout
from synclane_provider.core.run.multislot import MultiSlot
from synclane_provider.core.run.page_loop import page_loop
from synclane_provider.core.run.runner import slot_graces
from synclane_provider.core.run.stepper import Stepper
from synclane_provider.core.run.waits import Wait
from synclane_provider.core.run.write_end import WriteEnd
from tests.support.helpers import Background, declare, execute, owners, products, rows

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

    @contextmanager
    def paging(self, lane: str) -> Iterator[None]:
        """A page of ``lane`` in flight for the length of the block."""
        self.enter(lane)
        try:
            yield
        finally:
            self.leave(lane)


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
        with seen.paging(job.lane):
            time.sleep(0.3)
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
    # The 24 seats filled by a few takes each wave, the ends of pages that returned together written together: at
    # most one take and one finish statement for every two jobs, however the pages' returns spread on a busy machine.
    sent = database.traffic.statements
    assert sent["take_many"] <= 24 and sent["finish_many"] <= 24 and sent["finish_and_take"] == 0, sent


def test_an_async_handler_runs_every_lane_on_one_event_loop(database_url, schema, admin):
    """The same work with an ``async def`` handler: its pages wait together on one loop, on one thread."""
    seen = Lanes()
    loops: set[int] = set()
    threads: set[int] = set()

    async def handler(job):
        loops.add(id(asyncio.get_running_loop()))
        threads.add(threading.get_ident())
        with seen.paging(job.lane):
            await asyncio.sleep(0.3)
        return Page(None, 1)

    synclane = declare(schema, products(handler), owner_source=owners(*LANES))
    database = synclane.database(database_url)
    enqueue_two_jobs_per_lane(synclane, database)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=24, connections=2) as slot:
        summary = slot.drain()
    assert (summary.jobs, summary.outcomes["completed"], seen.overlaps) == (48, 48, 0)
    assert seen.peak >= 12, seen.peak
    assert (len(loops), len(threads)) == (1, 1)


def hanging_lanes(schema, database_url, handler, lanes: int):
    """A job in each of ``lanes`` lanes whose pages time out after 1 s, and are retried an hour later."""
    synclane = declare(
        schema,
        products(handler, page_timeout=timedelta(seconds=1)),
        owner_source=owners(*LANES[:lanes]),
        retry_delay=timedelta(hours=1),
    )
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in LANES[:lanes]:
            ops.enqueue("shops", owner, "products", key="a")
    return synclane, database


def test_a_page_that_hangs_holds_up_only_its_own_job(database_url, schema, admin):
    """One lane's page never returns within its 1 s timeout: that job fails with PageTimeout at its cursor, to be
    retried, while the other lanes' jobs complete around it; the hung page's thread is replaced."""
    release = threading.Event()

    def handler(job):
        if job.owner == "shop-00":
            release.wait(30)
        return Page(None, 1)

    synclane, database = hanging_lanes(schema, database_url, handler, 6)
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

    synclane, database = hanging_lanes(schema, database_url, handler, 4)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=4, connections=1) as slot:
        summary = slot.drain()
    assert (summary.outcomes["completed"], summary.outcomes["failed"]) == (3, 1)
    assert cancelled.wait(5)


def test_a_lane_two_wide_runs_two_of_its_jobs_at_once_in_one_slot(database_url, schema, admin):
    seen = Lanes()

    def handler(job):
        with seen.paging(job.owner):
            time.sleep(0.3)
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


class Gated:
    """A handler of three pages: the first returns at once (cursor "1"), the second waits for ``release`` (cursor
    "2"), the third ends the job."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.second: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, job):
        if job.cursor is None:
            return Page("1", 1)
        if job.cursor == "2":
            return Page(None, 1)
        with self._lock:
            self.second[job.owner] = self.second.get(job.owner, 0) + 1
        self.release.wait(30)
        return Page("2", 1)

    def all_in_second_page(self, owners_: list[str], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while set(self.second) != set(owners_):
            assert time.monotonic() < deadline, self.second
            time.sleep(0.02)


def six_lanes(schema, database_url, handler, **settings):
    synclane = declare(schema, products(handler), owner_source=owners(*LANES[:6]), **settings)
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in LANES[:6]:
            ops.enqueue("shops", owner, "products", key="a")
    return synclane, database


def test_an_interrupted_slot_hands_every_running_job_back_at_its_cursor_at_once(database_url, schema, admin):
    """Airflow's on_kill while six pages hang: within the kill grace every job is back to pending at the cursor its
    page started from, its attempt not counted, its lane free -- none waits for its lease to lapse."""
    handler = Gated()
    synclane, database = six_lanes(schema, database_url, handler)
    try:
        with MultiSlot(synclane, database, "shops", jobs_per_slot=6, connections=2) as slot:
            draining = Background(slot.drain, name="drain")
            handler.all_in_second_page(LANES[:6])
            interrupted = time.monotonic()
            slot.interrupt()
            summary = draining.result(20)
            took = time.monotonic() - interrupted
    finally:
        handler.release.set()
    assert summary.outcomes == {"released": 6}
    assert took < 5, took
    left = rows(admin, schema)
    assert {(r["status"], r["cursor"], r["attempt_count"], r["leased_by"]) for r in left} == {("pending", "1", 0, None)}


def test_a_stopped_slot_hands_each_running_job_back_after_its_page(database_url, schema, admin):
    """max_run_time (the slot's stop): each job's page in flight ends, its cursor is saved, and the job goes back to
    pending there, to be continued by the next run."""
    handler = Gated()
    synclane, database = six_lanes(schema, database_url, handler)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=6, connections=2) as slot:
        draining = Background(slot.drain, name="drain")
        handler.all_in_second_page(LANES[:6])
        slot.stop.set()
        handler.release.set()
        summary = draining.result(20)
    assert summary.outcomes == {"released": 6}
    left = rows(admin, schema)
    assert {(r["status"], r["cursor"], r["attempt_count"], r["leased_by"]) for r in left} == {("pending", "2", 0, None)}


def test_a_cancel_and_a_pause_stop_their_own_jobs_and_no_other(database_url, schema, admin):
    """While six jobs wait in their second page, one owner's work is cancelled and another owner is paused: the
    cancelled job ends abandoned, the paused owner's job goes back to pending at its cursor, the other four
    complete."""
    handler = Gated()
    synclane, database = six_lanes(schema, database_url, handler)
    with Operations(synclane, database) as ops, MultiSlot(synclane, database, "shops", jobs_per_slot=6) as slot:
        draining = Background(slot.drain, name="drain")
        handler.all_in_second_page(LANES[:6])
        ops.cancel("shops", LANES[0], "account disconnected")
        ops.pause("shops", LANES[1], "billing")
        handler.release.set()
        summary = draining.result(20)
    by_owner = {r["owner"]: r for r in rows(admin, schema)}
    assert (by_owner[LANES[0]]["status"], by_owner[LANES[0]]["cursor"]) == ("abandoned", "2")
    assert (by_owner[LANES[1]]["status"], by_owner[LANES[1]]["cursor"]) == ("pending", "2")
    assert {by_owner[o]["status"] for o in LANES[2:6]} == {"completed"}
    assert summary.outcomes == {"completed": 4, "abandoned": 1, "released": 1}


def test_pages_of_one_owner_that_fail_together_each_count_against_it(database_url, schema, admin):
    """An owner's lane twelve wide, twelve of its pages failing at the same moment: their ends come together, and
    each failure is counted on the owner's row (written once a statement, so they take a statement each)."""
    together = threading.Barrier(12, timeout=30)

    def handler(job):
        together.wait()
        raise RuntimeError("HTTP 500")

    synclane = declare(schema, products(handler), owner_source=owners(Owner("one", lane_width=12)))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for key in LANES[:12]:
            ops.enqueue("shops", "one", "products", key=key)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=12, connections=2) as slot:
        summary = slot.drain()
    assert summary.outcomes["failed"] == 12
    [owner] = admin.execute(
        f'SELECT health, consecutive_failures FROM "{schema}".owners WHERE owner = %s', ["one"]
    ).fetchall()
    assert owner == {"health": "failing", "consecutive_failures": 12}
    assert database.traffic.statements["finish_many"] == 12


def test_a_job_taken_over_from_a_slot_of_many_is_no_longer_written_by_it(database_url, schema, admin):
    """One job's lease is expired by hand and another worker takes it over while its page runs: the slot's write
    for that job finds the lease gone and stops (lease_lost); the other five complete as theirs."""
    handler = Gated()
    synclane, database = six_lanes(schema, database_url, handler)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=6, connections=2) as slot:
        draining = Background(slot.drain, name="drain")
        handler.all_in_second_page(LANES[:6])
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET leased_by = 'another-worker', lease_expires_at = now() + interval '5 minutes'"
            " WHERE owner = %s",
            [LANES[0]],
        )
        handler.release.set()
        summary = draining.result(20)
    assert summary.outcomes == {"completed": 5, "lease_lost": 1}
    [taken] = rows(admin, schema, "owner = %s", [LANES[0]])
    assert (taken["status"], taken["leased_by"], taken["cursor"]) == ("running", "another-worker", "1")


def test_a_job_enqueued_while_the_slot_runs_others_starts_at_once_on_the_notification(database_url, schema, admin):
    """The slot found nothing more to take and polls only every minute; a job enqueued meanwhile (which notifies the
    table's channel) starts within moments on an idle seat, heard by the process's one listening connection."""
    handler = Gated()
    synclane, database = six_lanes(schema, database_url, handler)
    minute = timedelta(minutes=1)
    with (
        Operations(synclane, database) as ops,
        MultiSlot(synclane, database, "shops", jobs_per_slot=8, connections=2, poll_interval=minute) as slot,
    ):
        draining = Background(slot.drain, name="drain")
        handler.all_in_second_page(LANES[:6])
        time.sleep(0.3)  # the idle seats' takes have found nothing
        enqueued = time.monotonic()
        ops.enqueue("shops", LANES[6], "products", key="late", lane=LANES[6])
        handler.all_in_second_page(LANES[:7], timeout=5)
        heard = time.monotonic() - enqueued
        handler.release.set()
        summary = draining.result(20)
    assert heard < 2, heard
    assert summary.outcomes == {"completed": 7}


class SlowApi:
    """An HTTP API on a local port answering each page after 0.3 s: two pages an owner, and how many requests
    it served at once at most."""

    def __init__(self) -> None:
        api = self
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

        class Pages(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                with api._lock:
                    api.now += 1
                    api.peak = max(api.peak, api.now)
                try:
                    time.sleep(0.3)
                    cursor = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("cursor", [""])[0]
                    body = json.dumps({"items": [1, 2, 3], "next": None if cursor else "2"}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    with api._lock:
                        api.now -= 1

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_one_shared_httpx_async_client_serves_every_lane_of_a_slot(database_url, schema, admin):
    """The README's async handler: one ``httpx.AsyncClient`` for every page of the slot, 24 lanes paging at once
    through it on the process's loop."""
    api = SlowApi()
    client = httpx.AsyncClient(base_url=api.url, limits=httpx.Limits(max_connections=24))

    async def fetch_items(job):
        response = await client.get("/items", params={"owner": job.owner, "cursor": job.cursor or ""})
        response.raise_for_status()
        body = response.json()
        return Page(body["next"], len(body["items"]))

    synclane = declare(schema, products(fetch_items), owner_source=owners(*LANES))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in LANES:
            ops.enqueue("shops", owner, "products", key="a")
    try:
        with MultiSlot(synclane, database, "shops", jobs_per_slot=24, connections=2) as slot:
            summary = slot.drain()
    finally:
        asyncio.run_coroutine_threadsafe(client.aclose(), page_loop()).result(5)
        api.close()
    assert (summary.outcomes, summary.pages, summary.records) == ({"completed": 24}, 48, 144)
    assert api.peak >= 12, api.peak


def test_seats_with_nothing_to_take_send_nothing_until_something_happens(database_url, schema, admin):
    """One job runs a long page and seven seats have nothing to do: after the take that found nothing, the slot
    sends no statement until a job ends, a notification comes or its poll interval passes."""
    handler = Gated()
    synclane = declare(schema, products(handler), owner_source=owners(LANES[0]))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        ops.enqueue("shops", LANES[0], "products", key="a")
    minute = timedelta(minutes=1)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=8, connections=2, poll_interval=minute) as slot:
        draining = Background(slot.drain, name="drain")
        handler.all_in_second_page(LANES[:1])
        time.sleep(0.3)
        before = database.traffic.snapshot()
        time.sleep(1.5)
        quiet = database.traffic - before
        handler.release.set()
        summary = draining.result(20)
    assert quiet.total == 0, quiet
    assert summary.outcomes == {"completed": 1}


def one_step_thread(**settings) -> Stepper:
    """A bare stepper of one step thread and one page at a time, never stopped or interrupted by its graces."""
    graces = slot_graces(threading.Event(), threading.Event(), timedelta(seconds=30))
    return Stepper("test", logging.getLogger("test"), graces=graces, steps=1, pages=1, **settings)


def test_a_work_started_takes_its_first_step_ahead_of_the_steps_already_waiting_for_a_step_thread():
    """When hundreds of pages end together, their finishes queue for the slot's few step threads. A job started
    then (a seat's next job, taken with its finish) takes its first step -- a moment's work before its page -- ahead
    of them: it waits for that backlog once, with its finish, not a second time to start."""
    stepper = one_step_thread()
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


def test_a_drain_that_runs_out_of_time_leaves_no_job_taken_for_later(database_url, schema, admin):
    """A drain given until a moment returns once its running jobs end: a job a seat took with its last finish is
    handed back at once, pending for any worker, not held until the slot closes."""

    def handler(job):
        time.sleep(0.4)
        return Page(None, 1)

    synclane = declare(schema, products(handler), owner_source=owners(*LANES[:4]))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in LANES[:4]:
            for key in "abc":
                ops.enqueue("shops", owner, "products", key=key)
    with MultiSlot(synclane, database, "shops", jobs_per_slot=4, connections=2) as slot:
        summary = slot.drain(until=time.monotonic() + 0.2)
        left = rows(admin, schema)
    assert summary.outcomes == {"completed": 4}
    assert sorted(r["status"] for r in left) == ["completed"] * 4 + ["pending"] * 8
    assert {r["leased_by"] for r in left if r["status"] == "pending"} == {None}


def test_an_end_reached_after_an_interrupt_was_raised_into_the_slot_is_still_written():
    """Ctrl-C or a task's timeout raised into a slot of many jobs' thread while a job's step after its page is on its
    way to its end: the end is written as it would have been, not dropped for the job's lease to lapse."""
    written: list[str] = []

    def write_ends(requests):
        written.extend(request.end for request in requests)
        return [("written", None) for _ in requests]

    stepper = one_step_thread(write_ends=write_ends)
    on_its_way, go_on = threading.Event(), threading.Event()

    def after_its_page():
        on_its_way.set()
        go_on.wait(10)  # the step between the page's return and the end, still running as the interrupt comes
        return (yield WriteEnd("the job's end", None))

    stepper.start(after_its_page(), "job")
    assert on_its_way.wait(10)
    threading.Timer(0.3, go_on.set).start()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            stepper.pump(10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        go_on.set()
        stepper.close()
    assert written == ["the job's end"]
