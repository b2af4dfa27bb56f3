"""A page that hangs: past its type's page_timeout the attempt fails at its cursor and the lane goes on; a
stopping pool lets go of it after its grace; an operator can hand the job back or abandon it; and a worker
whose job was taken from it says so once, not once a renewal."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest

from synclane_provider.core import Operations, Owner, Page, WorkerPool, WorkerSlot
from synclane_provider.core.run.runner import Outcome
from tests.support.helpers import Background, declare, owners, paged, products, rows

ACME = owners(Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"))


@pytest.fixture
def hang():
    """A handler whose acme-us pages hang at cursor 50 until the test lets them go (at the latest at its end)."""
    release = threading.Event()
    inner = paged(150, 50)

    def handler(job):
        if job.owner == "acme-us" and job.cursor == "50" and not release.is_set():
            release.wait(120)
        return inner(job)

    handler.release = release
    yield handler
    release.set()


def test_a_page_past_its_timeout_fails_at_its_cursor_and_its_lane_goes_on(schema, database_url, admin, hang, caplog):
    caplog.set_level(logging.WARNING)
    declaration = declare(
        schema,
        products(hang, page_timeout=timedelta(seconds=1)),
        owner_source=ACME,
        retry_delay=timedelta(milliseconds=200),
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops") as slot:
        ops.enqueue("shops", "acme-us", "products", key="hangs")
        ops.enqueue("shops", "acme-eu", "products", key="neighbour")
        started = time.monotonic()
        hung = slot.run_one(then_continue=False)
        assert 1 <= time.monotonic() - started < 5
        assert (hung.job.owner, hung.outcome, hung.pages) == ("acme-us", Outcome.FAILED, 1)
        assert hung.error == "PageTimeout: the page did not return within 1 s"
        [row] = rows(admin, schema, "owner = 'acme-us'")
        assert (row["status"], row["cursor"], row["attempt_count"], row["leased_by"]) == ("failed", "50", 1, None)
        assert any("the page has run for" in r.getMessage() for r in caplog.records)  # warned at half the timeout

        neighbour = slot.run_one(then_continue=False)  # the lane is free: its other job runs
        assert (neighbour.job.owner, neighbour.outcome) == ("acme-eu", Outcome.COMPLETED)

        hang.release.set()  # the left-behind page returns now: its answer is thrown away
        time.sleep(0.3)
        assert rows(admin, schema, "owner = 'acme-us'")[0]["cursor"] == "50"
        retried = slot.run_one(then_continue=False)
        assert (retried.job.owner, retried.outcome, retried.pages) == ("acme-us", Outcome.COMPLETED, 2)


def test_a_page_left_behind_that_returns_later_is_thrown_away_while_the_slot_waits_on_another(
    schema, database_url, admin
):
    """The slot's work goes on without the page it left behind; when that page returns at last, the slot is
    inside another job's page, and the late answer must not be taken for that page's."""
    started = {"hangs": threading.Event(), "next": threading.Event()}
    release = {"hangs": threading.Event(), "next": threading.Event()}
    records = {"hangs": 7, "next": 3}

    def handler(job):
        started[job.owner].set()
        release[job.owner].wait(20)
        return Page(None, records[job.owner])

    declaration = declare(
        schema,
        products(handler, page_timeout=timedelta(seconds=1)),
        owner_source=owners("hangs", "next"),
        retry_delay=timedelta(hours=1),
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops") as slot:
        ops.enqueue("shops", "hangs", "products", key="hangs")
        ops.enqueue("shops", "next", "products", key="next")
        draining = Background(slot.drain, name="drain")
        assert started["hangs"].wait(10) and not started["next"].is_set()
        assert started["next"].wait(10)  # the first page timed out, and the slot is in the next job's page
        release["hangs"].set()
        time.sleep(0.3)  # the late answer is back
        release["next"].set()
        summary = draining.result(20)

    assert summary.outcomes == {"failed": 1, "completed": 1}
    by_owner = {row["owner"]: row for row in rows(admin, schema)}
    assert (by_owner["hangs"]["status"], by_owner["hangs"]["processed_count"]) == ("failed", 0)
    assert (by_owner["next"]["status"], by_owner["next"]["processed_count"]) == ("completed", 3)


@pytest.mark.parametrize("jobs_per_slot", [1, 4])
def test_a_stopping_pool_lets_go_of_a_hung_page_after_its_grace(schema, database_url, admin, hang, jobs_per_slot):
    declaration = declare(schema, products(hang), owner_source=ACME)
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.enqueue("shops", "acme-us", "products", key="hangs")
    pool = WorkerPool(
        declaration, database, "shops", slots=1, jobs_per_slot=jobs_per_slot, stop_grace=timedelta(seconds=0.5)
    )
    running = Background(pool.run, name="pool")
    deadline = time.monotonic() + 20
    while rows(admin, schema)[0]["cursor"] != "50":
        assert time.monotonic() < deadline and running.is_alive()
        time.sleep(0.05)
    time.sleep(0.2)  # the second page is in flight, and hangs
    pool.shutdown()
    stopped = time.monotonic()
    assert running.result(20).outcomes == {"left_running": 1}
    assert time.monotonic() - stopped < 5
    [row] = rows(admin, schema)
    assert (row["status"], row["cursor"]) == ("running", "50")  # taken over once its lease lapses


def test_an_operator_hands_a_stuck_job_back_and_its_worker_says_so_once(schema, database_url, admin, hang, caplog):
    caplog.set_level(logging.WARNING)
    declaration = declare(schema, products(hang), owner_source=ACME, lease=timedelta(seconds=0.6))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops") as stuck:
        job = ops.enqueue("shops", "acme-us", "products", key="hangs")
        running = Background(lambda: stuck.run_one(then_continue=False), name="stuck")
        deadline = time.monotonic() + 20
        while rows(admin, schema)[0]["cursor"] != "50":
            assert time.monotonic() < deadline
            time.sleep(0.05)

        assert ops.release("shops", job.id)
        [row] = rows(admin, schema)
        assert (row["status"], row["cursor"], row["attempt_count"], row["leased_by"]) == ("pending", "50", 0, None)
        time.sleep(1.5)  # several renewal intervals of the old worker
        told = [r.getMessage() for r in caplog.records if "this worker stops writing to it" in r.getMessage()]
        assert told == [
            f"job {job.id}: the job is pending and leased by no one: handed back by hand (or a take of "
            "ours was rolled back); this worker stops writing to it"
        ]  # once, however long the page hangs
        assert running.result(20).outcome is Outcome.LEASE_LOST  # it gave up the page instead of waiting on it
        assert not ops.release("shops", job.id)  # not running any more


def test_an_operator_abandons_a_job_running_or_waiting(schema, database_url, admin):
    declaration = declare(schema, products(paged(150)), owner_source=owners("acme", "globex"))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops") as slot:
        ops.plan("shops")
        running = slot.take()
        waiting = [j for j in ops.list_jobs("shops") if j.id != running.id][0]
        assert ops.abandon("shops", running.id, "the account is gone")
        assert ops.abandon("shops", waiting.id, "the account is gone")
        assert not ops.abandon("shops", waiting.id, "twice")
    assert {(r["status"], r["error"], r["leased_by"]) for r in rows(admin, schema)} == {
        ("abandoned", "Abandoned: the account is gone", None)
    }


def test_a_lease_keeper_that_lost_its_job_stops_renewing_and_says_so_once(schema, database_url, admin, caplog):
    caplog.set_level(logging.WARNING)
    declaration = declare(schema, products(), lease=timedelta(seconds=0.3))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops") as slot:
        ops.plan("shops")
        job = slot.take()
        with slot.lease.watch(job.id) as lease:  # as while a page runs
            assert ops.release("shops", job.id)
            time.sleep(1.5)  # 15 renewal intervals
            assert lease.lost
    told = [r.getMessage() for r in caplog.records if "this worker stops writing to it" in r.getMessage()]
    assert len(told) == 1, told
