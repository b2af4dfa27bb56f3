"""A lane's rate budget and the throttle a server's named wait puts on it: declared, taken in one statement, kept across processes.

The API's request log is the judge: a fake API records when each request arrived, and the tests count them
per one-second window (never more than the budget, plus its burst) and per throttle event (one 429, not one
per job of the lane). Each guarantee is also run without its guard, to show that the test can fail.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import timedelta

import pytest
from psycopg import sql

from synclane_provider.core import (
    DeclarationError,
    Job,
    Operations,
    Owner,
    OwnerSourceError,
    Page,
    Rate,
    SyncLane,
    WorkerPool,
    WorkerSlot,
)
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.owners import owners_of
from synclane_provider.core.declare.ratelimit import reserve
from synclane_provider.core.run.lane_gate import LaneGate
from synclane_provider.core.run.runner import Outcome
from synclane_provider.core.run.waits import waited_out
from tests.support.budget_race import QUEUE, FakeAPI, Throttle, budget_run, declaration, max_in_any_window
from tests.support.helpers import Background, declare, paged, products, race

FIVE_A_SECOND = Rate(5, per=timedelta(seconds=1), burst=1)


# --- declaring ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"requests": 0}, "requests must be a positive integer, got 0"),
        ({"requests": 2.5}, "requests must be a positive integer, got 2.5"),
        ({"requests": 5, "per": 1}, "per must be a timedelta, got 1"),
        ({"requests": 5, "per": timedelta(0)}, "per must be positive, got 0 s"),
        ({"requests": 5, "burst": -1}, "burst must be an integer of zero or more, got -1"),
        ({"requests": 5, "headroom": 1.0}, "headroom must be a fraction from 0 up to (not including) 1, got 1.0"),
        ({"requests": 10**7, "per": timedelta(seconds=1)}, "finer than a microsecond"),
    ],
)
def test_a_rate_that_cannot_work_is_refused_when_declared_naming_the_value(arguments, complaint):
    with pytest.raises(DeclarationError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        Rate(**arguments)


def test_a_queue_or_owner_rate_must_be_a_rate():
    with pytest.raises(DeclarationError, match=r"rate of queue 'shops' must be a Rate .*got '10/s'"):
        declare("synclane", products(), rate="10/s")
    with pytest.raises(DeclarationError, match=r"rate of owner 'acme' must be a Rate .*got 10"):
        Owner("acme", rate=10)


def test_owners_sharing_a_lane_must_name_the_same_rate():
    declaration = declare(
        "synclane",
        products(),
        owner_source=lambda queue: [
            Owner("acme-us", lane="acme", rate=Rate(5)),
            Owner("acme-eu", lane="acme", rate=Rate(10)),
        ],
    )
    with pytest.raises(
        OwnerSourceError,
        match=r"'acme-us' and 'acme-eu' share lane 'acme' but name different rates "
        r"\(5/1 s and 10/1 s\)",
    ):
        owners_of(declaration.queue("shops"))
    same = declare(
        "synclane",
        products(),
        owner_source=lambda queue: [
            Owner("acme-us", lane="acme", rate=Rate(5)),
            Owner("acme-eu", lane="acme", rate=Rate(5)),
            Owner("globex"),
        ],
    )
    assert [o.rate for o in owners_of(same.queue("shops"))] == [Rate(5), Rate(5), None]


# --- the statement ----------------------------------------------------------------------------------------------


def test_racing_takers_each_get_their_own_turn_as_the_arithmetic_says(database_url, schema, clock):
    """16 threads take 10 units each at one pinned instant: the waits are exactly the turns 0, 1, … 159 of the
    lane (less the burst), each given once. A read-then-write instead of one statement hands out turns twice."""
    rate = Rate(5, burst=2, headroom=0)
    synclane = declare(schema, products())
    database = synclane.database(database_url)
    sessions = [Session(database) for _ in range(16)]

    def takes(session: Session) -> list[float]:
        store = Store(session)
        return [
            store.take_lane_budget(QUEUE, "acme", cost=rate.interval, tolerance=rate.tolerance, now=clock())
            for _ in range(10)
        ]

    try:
        waits = sorted(w for each in race([lambda s=s: takes(s) for s in sessions]) for w in each)
    finally:
        for session in sessions:
            session.close()
    expected, tat = [], None
    for _ in range(160):
        tat, wait = reserve(rate, tat, clock())
        expected.append(wait.total_seconds())
    assert waits == pytest.approx(expected)
    assert waits[:3] == [0.0, 0.0, 0.0] and waits[3] == pytest.approx(0.2)  # the burst of 2, then the rate


# --- across processes -------------------------------------------------------------------------------------------


def test_workers_in_two_processes_keep_to_the_lanes_budget_and_use_most_of_it(database_url, schema):
    """5 requests a second (burst 1) on lane acme, shared by acme-us and acme-eu: two worker processes of two
    slots each, 4 jobs of 5 pages of 2 requests (the second taken with job.spend()). The API never sees more
    than 6 requests in a second, and sees at least 90 % of what the budget allows."""
    run = budget_run(database_url, schema, rate=FIVE_A_SECOND, jobs_per_owner=2)
    assert run.requests == 40
    assert run.max_in_any_window <= 5 + 1, run
    assert run.utilisation >= 0.9, run


def test_a_page_goes_on_its_turn_or_not_at_all_so_a_loaded_machine_never_overruns_the_api(database_url, schema):
    """2 requests a second, no burst, as in the demo: two worker processes of two slots each run 8 jobs of 3
    one-request pages in lane acme, handing the lane from job to job, on a machine with a busy loop per core. The
    API counts arrivals when it accepts them and refuses a third in any second: it refuses none. (Pacing only
    the grants let a page delayed after its turn arrive close behind the next one's.)"""
    run = budget_run(database_url, schema, rate=Rate(2), jobs_per_owner=4, pages=3, requests_per_page=1, loaded=True)
    assert run.requests >= 24, run
    assert (run.over_limit, run.max_in_any_window <= 2) == (0, True), run


@pytest.mark.parametrize("requests_per_page", [1, 2], ids=["one request a page", "a second one with spend()"])
def test_a_slot_that_wakes_late_for_its_turn_gives_it_up_and_takes_the_next(database_url, schema, requests_per_page):
    """The same lane, with every third wait for a turn ending 0.3 s late in each process: each late page (or late
    request paid with job.spend()) takes a new turn instead of going 0.3 s after its own, close behind the next,
    and the API refuses nothing."""
    run = budget_run(
        database_url,
        schema,
        rate=Rate(2),
        jobs_per_owner=2,
        pages=3,
        requests_per_page=requests_per_page,
        wakes_late_every=3,
    )
    assert run.requests >= 12 * requests_per_page, run
    assert (run.over_limit, run.max_in_any_window <= 2) == (0, True), run


def test_a_slot_asked_to_stop_while_it_waits_for_a_new_turn_sends_nothing_and_hands_the_job_back(
    database_url, schema, admin, monkeypatch
):
    """The handler starts 0.2 s after the page's turn (past its 26 ms of room) and takes a new turn; the slot is
    asked to stop while it waits for it: the page is not sent, and the job goes back to pending."""
    sent: list[Job] = []
    synclane = declare(schema, products(lambda job: sent.append(job) or Page(None, 1)), rate=Rate(2))
    database = synclane.database(database_url)
    before_page, take_budget = LaneGate.before_page, Store.take_page_turn
    takes = []

    def woke_late(gate, job, **waits):
        turn = yield from before_page(gate, job, **waits)
        time.sleep(0.2)
        return turn

    def stop_at_the_second_take(store, *args, **kwargs):
        takes.append(args)
        if len(takes) == 2:
            slot.stop.set()
        return take_budget(store, *args, **kwargs)

    monkeypatch.setattr(LaneGate, "before_page", woke_late)
    monkeypatch.setattr(Store, "take_page_turn", stop_at_the_second_take)
    with Operations(synclane, database) as ops, WorkerSlot(synclane, database, "shops") as slot:
        ops.enqueue("shops", "acme", "products", key="now")
        result = slot.run_one()
    assert (result.outcome, len(takes), sent) == (Outcome.RELEASED, 2, [])
    [row] = admin.execute(sql.SQL("SELECT status, leased_by FROM {}.jobs").format(sql.Identifier(schema))).fetchall()
    assert row == {"status": "pending", "leased_by": None}


def test_the_same_run_without_the_budget_overruns_the_api(database_url, schema):
    """The check above can fail: with no rate taken before the pages, the API sees the 40 requests at once."""
    run = budget_run(database_url, schema, rate=FIVE_A_SECOND, jobs_per_owner=2, enforce=False)
    assert run.max_in_any_window > 5 + 1 and run.over_limit > 0, run


# --- in one process: overrides, the log line, spend() -----------------------------------------------------------


def test_an_owners_rate_overrides_the_queues_and_a_lane_without_one_has_no_budget_row(database_url, schema, admin):
    with FakeAPI().serve() as served:
        synclane = declaration(
            schema,
            served.url,
            rate=None,
            pages=3,
            requests_per_page=1,
            owners=(
                Owner("acme", rate=Rate(4, headroom=0)),
                Owner("globex"),
            ),
        )
        database = synclane.database(database_url)
        with Operations(synclane, database) as ops:
            ops.enqueue(QUEUE, "acme", "items")
            ops.enqueue(QUEUE, "globex", "items")
        WorkerPool(synclane, database, QUEUE, slots=2).run_until_settled()
        acme, globex = served.api.times("acme"), served.api.times("globex")
    assert len(acme) == len(globex) == 3
    assert acme[-1] - acme[0] >= 2 * 0.25 - 0.01  # 4 a second: a quarter of a second apart
    budgets = admin.execute(
        sql.SQL("SELECT lane, tat IS NOT NULL AS taken FROM {}.lane_budgets ORDER BY lane").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    assert budgets == [{"lane": "acme", "taken": True}]


def test_the_wait_shows_in_the_jobs_log_line(database_url, schema, caplog):
    synclane = declare(schema, products(paged(150, 50)), rate=Rate(10, headroom=0))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        ops.enqueue("shops", "acme", "products")
    with caplog.at_level(logging.INFO, logger="synclane_provider.core.run.worker"):
        WorkerPool(synclane, database, "shops", slots=1).drain()
    line = next(r.getMessage() for r in caplog.records if "completed after 3 page(s)" in r.getMessage())
    assert re.search(r", waited 0\.[12]\d* s for lane acme$", line), line


def test_spend_outside_a_worker_or_without_a_rate_waits_for_nothing(database_url, schema):
    synclane = declare(schema, products())
    job = _any_job(synclane, database_url)
    assert job.spend(3) == timedelta(0)
    gate = LaneGate(
        Store(Session(synclane.database(database_url))),
        synclane.queue("shops"),
        clock=lambda: None,
        stop=threading.Event(),
        refresh=timedelta(minutes=1),
    )
    assert gate.spend(job, 3) == timedelta(0)
    with pytest.raises(ValueError, match="positive number of units, got 0"):
        gate.spend(job, 0)


def _any_job(synclane: SyncLane, database_url: str) -> Job:
    with Operations(synclane, synclane.database(database_url)) as ops:
        job = ops.enqueue("shops", "acme", "products")
    assert job is not None
    return job


# --- on its turn or not at all: how late a page may start -------------------------------------------------------

SLOW_RATE = Rate(1, per=timedelta(seconds=10), burst=5, headroom=0.5)
"""One request every 20 s with 10 s of lateness (half of it, 5 s, the page's), and a burst that lets the first
six takes at one instant go at once: no test below sleeps for a turn."""


class Watch:
    """The monotonic clock the lane gate reads, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def late_gate(database_url, schema, clock, admin, monkeypatch):
    """A lane gate on the lane acme of SLOW_RATE, its job, the watch it reads, and the turns taken in the lane
    so far (read from the lane's budget row: each take moves it one interval on from the pinned instant)."""
    assert SLOW_RATE.lateness == timedelta(seconds=10)
    synclane = declare(schema, products(), rate=SLOW_RATE)
    _any_job(synclane, database_url)
    with WorkerSlot(synclane, synclane.database(database_url), "shops") as slot:
        job = slot.take()  # leased: a page is asked for a job its worker holds
    watch = Watch()
    monkeypatch.setattr("synclane_provider.core.run.lane_gate.time", watch)
    session = Session(synclane.database(database_url))
    gate = LaneGate(
        Store(session), synclane.queue("shops"), clock=clock, stop=threading.Event(), refresh=timedelta(minutes=1)
    )

    def turns_taken() -> float:
        [row] = admin.execute(
            sql.SQL("SELECT tat FROM {}.lane_budgets WHERE lane = 'acme'").format(sql.Identifier(schema))
        ).fetchall()
        return (row["tat"] - clock()) / SLOW_RATE.interval

    yield gate, job, watch, turns_taken
    session.close()


@pytest.mark.parametrize(("late", "turns"), [(4.9, 1), (5.1, 2)])
def test_a_page_later_than_half_the_rates_lateness_gives_its_turn_up_and_one_within_it_keeps_it(late_gate, late, turns):
    """The other half of the lateness is the handler's way to the API: a page that starts 5.1 s after its turn
    (within the rate's 10 s of lateness, but past half of it) takes a new turn; one 4.9 s late keeps its own."""
    gate, job, watch, turns_taken = late_gate
    turn = waited_out(gate.before_page(job, throttle_left=0.0), threading.Event())  # its turn is now, sent at 1000.0
    assert turns_taken() == 1
    watch.now = 1000.0 + late
    gate.keep_turn(job, turn)
    assert turns_taken() == turns


@pytest.mark.parametrize(("after_the_answer", "turns"), [(1.9, 1), (2.1, 2)])
def test_a_turn_is_reckoned_from_when_the_take_was_sent_so_a_slow_answer_counts_as_lateness(
    late_gate, monkeypatch, after_the_answer, turns
):
    """The take's answer comes back 3 s after it was sent (a busy database, a slow network): the database placed
    the turn no earlier than the sending, so a page that starts 2.1 s after the answer is 5.1 s late and takes
    a new turn, and one 1.9 s after it keeps its own."""
    gate, job, watch, turns_taken = late_gate
    take_budget = Store.take_page_turn

    def slow_answer(store, *args, **kwargs):
        wait = take_budget(store, *args, **kwargs)
        watch.now += 3.0
        return wait

    monkeypatch.setattr(Store, "take_page_turn", slow_answer)
    turn = waited_out(gate.before_page(job, throttle_left=0.0), threading.Event())  # sent at 1000.0, answered at 1003.0
    watch.now = 1003.0 + after_the_answer
    gate.keep_turn(job, turn)
    assert turns_taken() == turns


# --- a throttle holds the whole lane ----------------------------------------------------------------------------

THROTTLED_OWNERS = (Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"), Owner("globex"))


def throttled_run(database_url: str, schema: str) -> FakeAPI:
    """acme-us, acme-eu (lane acme) and globex, 3 jobs each of 4 one-request pages, 3 slots. The API answers
    acme's 4th request 429 with Retry-After: 1, and every acme request in the second after it too. Each answer
    takes 20 ms, so that globex still has pages to fetch during that second."""
    api = FakeAPI(throttle=Throttle(accounts=("acme-us", "acme-eu"), after=4, retry_after=1), latency=0.02)
    with api.serve() as served:
        synclane = declaration(schema, served.url, rate=None, pages=4, requests_per_page=1, owners=THROTTLED_OWNERS)
        database = synclane.database(database_url)
        with Operations(synclane, database) as ops:
            for owner in ("acme-us", "acme-eu", "globex"):
                for n in range(3):
                    ops.enqueue(QUEUE, owner, "items", key=f"run-{n}")
        pool = WorkerPool(synclane, database, QUEUE, slots=3)
        Background(pool.run_until_settled, name="throttled-pool").result(timeout=120)
    return api


def test_a_named_wait_holds_the_whole_lane_and_other_lanes_go_on(database_url, schema, admin):
    api = throttled_run(database_url, schema)
    throttled = api.times(status=429)
    assert len(throttled) == 1, f"one 429 for the one throttle event, got {len(throttled)}"
    throttle_ends = throttled[0] + 1.0
    acme = api.times("acme-us") + api.times("acme-eu")
    assert not [t for t in acme if throttled[0] < t < throttle_ends], "a job of lane acme sent during the throttle"
    assert [t for t in api.times("globex") if throttled[0] < t < throttle_ends], "lane globex waited too"
    assert len(api.times(status=200)) == 3 * 3 * 4  # every page served once: the throttled one again later
    statuses = admin.execute(sql.SQL("SELECT DISTINCT status FROM {}.jobs").format(sql.Identifier(schema))).fetchall()
    assert statuses == [{"status": "completed"}]


def test_without_the_lane_throttle_the_lanes_next_job_hits_the_same_wall(database_url, schema, monkeypatch):
    """The check above can fail: with the throttle delaying only its job, acme-eu runs into the same 429."""
    monkeypatch.setattr(LaneGate, "throttle", lambda self, job, wait: None)
    api = throttled_run(database_url, schema)
    assert len(api.times(status=429)) > 1


def test_a_throttle_holds_back_the_lanes_waiting_jobs_and_tells_a_job_taken_anyway(database_url, schema, clock, admin):
    synclane = declare(
        schema,
        products(),
        owner_source=lambda queue: [Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"), "globex"],
    )
    database = synclane.database(database_url)
    with Operations(synclane, database, clock=clock) as ops:
        for owner in ("acme-eu", "globex"):
            ops.enqueue("shops", owner, "products")
        session = Session(database)
        store = Store(session)
        until = store.throttle_lane("shops", "acme", wait=timedelta(seconds=30), now=clock())
        assert until == clock() + timedelta(seconds=30)
        waiting = {
            r["owner"]: r["next_run_at"]
            for r in admin.execute(
                sql.SQL("SELECT owner, next_run_at FROM {}.jobs").format(sql.Identifier(schema))
            ).fetchall()
        }
        assert waiting == {"acme-eu": until, "globex": clock()}
        late = ops.enqueue("shops", "acme-us", "products")  # inserted during the throttle: due now
        assert late is not None
        taken = store.finish_and_take(
            queue="shops", worker="w", lease=timedelta(minutes=1), finish=None, take=True, now=clock()
        ).taken
        other = store.finish_and_take(
            queue="shops", worker="w2", lease=timedelta(minutes=1), finish=None, take=True, now=clock()
        ).taken
        session.close()
    assert {taken.job.owner, other.job.owner} == {"globex", "acme-us"}
    assert {t.job.owner: t.throttle_left for t in (taken, other)} == {"globex": 0.0, "acme-us": 30.0}


def test_max_in_any_window_counts_half_open_windows():
    assert max_in_any_window([0.0, 0.5, 1.0, 1.2]) == 3
    assert max_in_any_window([0.0, 0.2, 0.4, 0.6, 0.8, 1.0]) == 5
    assert max_in_any_window([]) == 0


# --- a throttle on a lane with a budget ------------------------------------------------------------------------------


def take(store: Store, rate: Rate, now) -> float:
    return store.take_lane_budget("shops", "acme", cost=rate.interval, tolerance=rate.tolerance, now=now)


@pytest.mark.parametrize("rate", [Rate(5, headroom=0), Rate(5, burst=2, headroom=0)], ids=["no burst", "burst 2"])
def test_takes_during_a_throttle_wait_as_the_reference_arithmetic_says(lane_store, clock, rate):
    """A throttle both moves the lane's turns past its end and keeps even a burst from going before it: each take's
    wait is what reserve() computes, taking by taking, before, during and after a 2 s throttle."""
    tat, throttled_until, got, expected = None, None, [], []
    for step in range(12):
        if step == 3:
            throttled_until = lane_store.throttle_lane("shops", "acme", wait=timedelta(seconds=2), now=clock())
        got.append(take(lane_store, rate, clock()))
        tat, wait = reserve(rate, tat, clock(), throttled_until=throttled_until)
        expected.append(wait.total_seconds())
        clock.advance(timedelta(milliseconds=150))
    assert got == pytest.approx(expected)
    assert got[3] == pytest.approx(2.0)  # the first take in the throttle waits it out, burst or not


def test_an_idle_lanes_first_take_after_a_quiet_spell_waits_nothing_and_the_next_its_turn(lane_store, clock):
    rate = Rate(5, headroom=0)
    for _ in range(10):
        take(lane_store, rate, clock())  # two seconds of turns taken at once
    clock.advance(timedelta(hours=1))
    assert take(lane_store, rate, clock()) == 0.0
    assert take(lane_store, rate, clock()) == pytest.approx(0.2)


def test_a_later_shorter_throttle_never_cuts_a_longer_one(lane_store, database_url, schema, admin, clock):
    with Operations(declare(schema, products()), lane_store.session.database, clock=clock) as ops:
        ops.enqueue("shops", "acme", "products", key="waiting")
    longer = lane_store.throttle_lane("shops", "acme", wait=timedelta(seconds=30), now=clock())
    clock.advance(timedelta(seconds=1))
    assert lane_store.throttle_lane("shops", "acme", wait=timedelta(seconds=5), now=clock()) == longer
    [job] = admin.execute(sql.SQL("SELECT next_run_at FROM {}.jobs").format(sql.Identifier(schema))).fetchall()
    assert job["next_run_at"] == longer
    assert take(lane_store, Rate(5), clock()) == pytest.approx(29.0)


def test_a_job_running_beside_a_throttled_one_in_a_wide_lane_learns_of_the_throttle_at_its_next_cursor_save(
    database_url, schema, clock
):
    """acme is 2 wide. While the second job's first page runs, the first is told to wait 1 s (a 429 naming it):
    the second job saves its cursor, is told what is left of the throttle, and waits it out before its next page."""
    pages_at: list[float] = []

    def second(job: Job) -> Page:
        if job.cursor is None:
            throttling = Store(Session(synclane.database(database_url)))
            try:
                throttling.throttle_lane("shops", "acme", wait=timedelta(seconds=1), now=clock())
            finally:
                throttling.session.close()
        pages_at.append(time.monotonic())
        return paged(100, 50)(job)

    synclane = declare(schema, products(second), owner_source=lambda queue: [Owner("acme", lane_width=2)])
    database = synclane.database(database_url)
    with (
        Operations(synclane, database, clock=clock) as ops,
        WorkerSlot(synclane, database, "shops", clock=clock) as throttled,
        WorkerSlot(synclane, database, "shops", clock=clock) as beside,
    ):
        ops.enqueue("shops", "acme", "products", key="throttled")
        ops.enqueue("shops", "acme", "products", key="beside")
        assert throttled.take().lane_slot == 0  # held, its page in flight
        result = beside.run_one()
    assert (result.outcome, result.pages) == (Outcome.COMPLETED, 2)
    assert result.waited >= timedelta(seconds=0.9)
    assert pages_at[1] - pages_at[0] >= 0.9
