"""Which job a take picks: declared type order first, then the newest window, with deferred jobs last in their
lane -- and the same answer whichever way the take statement finds it.

The take looks among the first due jobs of the queue; when all of those are in busy lanes it walks the lanes
that have waiting work instead. Each test runs twice: once where the first look finds the job, and once
behind a head of the queue that is all in one busy lane, so that only the lane walk can find it.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import datetime, timedelta, timezone

import pytest

from synclane_provider.core import Operations, WindowedType, WorkerSlot
from tests.support.helpers import declare, orders, owners, paged, products, rows
from tests.support.lane_race import overtaken, take_in_rounds
from tests.support.take_table import add_job, another_take_holding

UTC = timezone.utc
NOW = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
BUSY_HEAD = 100
"""Due jobs of one busy lane put at the head of the queue: more than the take's first look reads (32)."""


@pytest.fixture(params=["first look", "lane walk"])
def table(request, schema, database_url, admin):
    """An empty jobs table and a way to put rows in it; for "lane walk", the head of the queue is all busy."""
    declaration = declare(schema, products(), orders(), owner_source=owners())
    database = declaration.database(database_url)
    slots: list[WorkerSlot] = []
    with Operations(declaration, database) as ops:
        ops.activity("shops")  # creates the table

    def add(lane: str, *, days_ago: int, status: str = "pending", type: str = "orders", running_by: str | None = None):
        add_job(admin, schema, NOW, lane, days_ago=days_ago, status=status, type=type, running_by=running_by)

    if request.param == "lane walk":
        add("busy", days_ago=0, status="running", running_by="someone-else")
        for day in range(1, BUSY_HEAD + 1):
            add("busy", days_ago=-day, type="products")  # the first type, in the future: before anything a test adds

    def take():
        slot = WorkerSlot(declaration, database, "shops", clock=lambda: NOW)
        slots.append(slot)
        job = slot.take()
        return None if job is None else (job.lane, (NOW - job.window_end).days, job.status.value, job.type)

    yield add, take
    for slot in slots:
        slot.close()


def test_the_best_free_lane_gives_its_newest_window(table):
    add, take = table
    for day in (100, 101, 102, 103):
        add("b", days_ago=day)
    for day in (53, 52, 51, 50):
        add("c", days_ago=day)

    assert take() == ("c", 50, "running", "orders")  # the newest window of any free lane...
    assert take() == ("b", 100, "running", "orders")  # ...then the newest of the lane still free
    assert take() is None


def test_an_earlier_declared_type_goes_before_a_newer_window(table):
    add, take = table
    add("b", days_ago=10)
    add("b", days_ago=20, type="products")
    add("c", days_ago=5)

    assert take() == ("b", 20, "running", "products")
    assert take() == ("c", 5, "running", "orders")


def test_a_deferred_job_steps_aside_for_a_due_job_of_its_lane(table):
    add, take = table
    add("b", days_ago=1, status="deferred")  # newer, but it used up its regular attempts
    add("b", days_ago=30, status="failed")

    assert take() == ("b", 30, "running", "orders")
    assert take() is None  # its lane is busy: the deferred job waits until the lane is otherwise idle


def test_a_deferred_job_runs_when_nothing_else_of_its_lane_is_due(table):
    add, take = table
    add("b", days_ago=1, status="deferred")
    add("c", days_ago=2)

    assert take() == ("b", 1, "running", "orders")
    assert take() == ("c", 2, "running", "orders")


def test_a_lane_whose_head_another_take_holds_is_passed_over_whole(table, admin, schema):
    """Another worker's take holds lane b's newest window (it may yet lose its race for the lane and hand it
    back): a take goes on to the next lane, never to lane b's next window, which would then start first."""
    add, take = table
    for day in (1, 2, 3):
        add("b", days_ago=day)
    add("c", days_ago=5)

    with another_take_holding(admin, schema, NOW, "b", days_ago=1):
        assert take() == ("c", 5, "running", "orders")
        assert take() is None
    assert take() == ("b", 1, "running", "orders")


def test_a_long_re_sync_keeps_the_owners_freshness_lag_within_two_periods(schema, database_url, clock):
    """Two years of one type synced again, one job run every five minutes: the other type's recurring window
    (and the re-synced type's own) still runs when due, so no lag ever passes two periods. Without re-sync work
    going after the lane's planned jobs, the first type's 730 windows would all go first."""
    every = timedelta(minutes=15)
    quick = dict(horizon=timedelta(days=2), slice=timedelta(days=1), every=every, overlap=timedelta(0))
    declaration = declare(
        schema, orders(**quick), WindowedType("refunds", paged(0), **quick), owner_source=owners("acme")
    )
    with (
        Operations(declaration, declaration.database(database_url), clock=clock) as ops,
        WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot,
    ):
        ops.plan("shops")
        while slot.run_one(then_continue=False) is not None:  # the first load
            pass
        start = clock.now.replace(hour=0, minute=0) - timedelta(days=730)
        request = ops.resync("shops", "orders", start, start + timedelta(days=730), reason="two years again")
        assert request.made == 730
        lags = []
        for _ in range(90):
            clock.advance(timedelta(minutes=5))
            ops.plan("shops")
            slot.run_one(then_continue=False)
            lags.extend(
                row.lag
                for row in ops.store.window_lags(
                    "shops", ["acme"], ["orders", "refunds"], over=None, now=clock.now, limit=10
                )
            )
        resynced = ops.list_jobs("shops", mode="manual", status="completed", limit=1000)
    assert len(lags) == 180 and max(lags) <= 2 * every, max(lags)
    assert len(resynced) >= 30  # and the re-sync moved on meanwhile


def test_racing_takes_start_each_lanes_jobs_in_its_order(schema, database_url, admin):
    """Six slots take at once, round after round, on two lanes: a slot that finds a lane's head held by another
    slot's take (which may yet lose its race for the lane) takes nothing of that lane, so no history window
    starts before the newer one next to it."""
    declaration = declare(
        schema, orders(horizon=timedelta(days=100), slice=timedelta(days=1)), owner_source=owners("acme", "globex")
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    with ExitStack() as stack:
        slots = [stack.enter_context(WorkerSlot(declaration, database, "shops")) for _ in range(6)]
        assert take_in_rounds(slots) == len(rows(admin, schema)) // 2  # one job of each lane a round
    assert {row["status"] for row in rows(admin, schema)} == {"completed"}
    assert overtaken(admin, schema) == []
