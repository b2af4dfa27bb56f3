"""Taking and running jobs: order, lanes, cursors, retries, throttles, deferral, abandonment, stops, leases."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from synclane_provider.core import (
    JobAbandoned,
    JobStatus,
    JobThrottled,
    Operations,
    Owner,
    Page,
    SnapshotType,
    WorkerPool,
    WorkerSlot,
)
from synclane_provider.core.db.store import Finish, Store
from synclane_provider.core.run.runner import Outcome
from tests.support.helpers import Background, Recorder, declare, execute, failing, orders, owners, paged, products, rows

MINUTE = timedelta(minutes=1)


@pytest.fixture
def setup(schema, database_url, clock):
    """Declare a queue, plan it at the pinned time, and make worker slots for it."""

    made = []

    def make(*types, owner_source=None, plan=True, **settings):
        declaration = declare(schema, *types, owner_source=owner_source, **settings)
        database = declaration.database(database_url)
        ops = Operations(declaration, database)
        made.append(ops)
        if plan:
            ops.plan("shops", now=clock.now)

        def slot(**kwargs):
            worker = WorkerSlot(declaration, database, "shops", clock=clock, **kwargs)
            made.append(worker)
            return worker

        return ops, slot

    yield make
    for worker in made:
        worker.close()


def job_row(admin, schema, job_id):
    [row] = rows(admin, schema, "id = %s", [job_id])
    return row


def test_a_job_runs_page_by_page_saving_the_cursor_after_each(setup, admin, schema):
    seen_on_row = []

    def handler(job):
        seen_on_row.append(job_row(admin, schema, job.id)["cursor"])
        return paged(120, 50)(job)

    recorder = Recorder(handler)
    _, slot = setup(products(recorder))
    result = slot().run_one()

    assert result.outcome is Outcome.COMPLETED
    assert (result.pages, result.records) == (3, 120)
    assert [cursor for _, cursor in recorder.calls] == [None, "50", "100"]
    assert seen_on_row == [None, "50", "100"]  # each page starts from what the row says
    row = job_row(admin, schema, result.job.id)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", 120, 1)
    assert row["leased_by"] is None and row["lease_expires_at"] is None and row["completed_at"] is not None


def test_types_run_in_declared_order_then_newest_window_first(setup):
    _, slot = setup(products(), orders(), plan=True)
    worker = slot()
    taken = []
    while (result := worker.run_one()) is not None:
        taken.append((result.job.type, result.job.mode.value, result.job.window_end))
    assert taken[0][:2] == ("products", "initial")
    window_ends = [end for _, _, end in taken[1:]]
    assert window_ends == sorted(window_ends, reverse=True)
    assert taken[1][1] == "recurring"  # what is new is never stuck behind history


def test_a_busy_lane_is_skipped_and_other_lanes_run(setup, admin, schema):
    source = owners(Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"), "globex")
    _, slot = setup(products(), owner_source=source)
    first = slot().take()
    second = slot().take()
    third = slot().take()
    assert first.lane == "acme" and second.lane == "globex"
    assert third is None  # the other acme job waits for its lane
    assert [r["lane"] for r in rows(admin, schema, "status = 'running'")] == ["acme", "globex"]


def test_failures_retry_with_a_doubling_capped_delay_then_defer_then_abandon(setup, admin, schema, clock):
    _, slot = setup(products(failing(RuntimeError("boom"))), retry_max_delay=timedelta(minutes=5))
    worker = slot()
    seen = []
    for _ in range(6):
        result = worker.run_one()
        row = job_row(admin, schema, result.job.id)
        seen.append((row["status"], row["attempt_count"], row["next_run_at"] - clock.now))
        assert row["error"] == "RuntimeError: boom"
        assert worker.take() is None  # not due before its delay is over
        clock.advance(row["next_run_at"] - clock.now)
    assert seen == [
        ("failed", 1, MINUTE),
        ("failed", 2, 2 * MINUTE),
        ("failed", 3, 4 * MINUTE),
        ("failed", 4, 5 * MINUTE),  # capped
        ("deferred", 5, 5 * MINUTE),
        ("abandoned", 6, timedelta(0)),
    ]
    assert worker.run_one() is None  # abandoned waits for a person


def test_a_deferred_job_runs_only_when_its_lane_is_otherwise_idle(setup, admin, schema, clock):
    ops, slot = setup(products(), plan=False, max_attempts=1)
    ops.enqueue("shops", "acme", "products", key="first", now=clock.now)
    ops.enqueue("shops", "acme", "products", key="second", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET status = 'deferred', attempt_count = 1 WHERE dedup_key = 'manual:first'")
    worker = slot()
    assert worker.run_one().job.dedup_key == "manual:second"
    last = worker.run_one()
    assert (last.job.dedup_key, last.job.attempt_count, last.outcome) == ("manual:first", 2, Outcome.COMPLETED)


def test_the_deferred_last_attempt_failing_abandons_the_job(setup, admin, schema, clock):
    _, slot = setup(products(failing(ValueError("bad page"))), max_attempts=1)
    worker = slot()
    assert worker.run_one().outcome is Outcome.DEFERRED
    clock.advance(MINUTE)
    result = worker.run_one()
    assert result.outcome is Outcome.ABANDONED
    assert job_row(admin, schema, result.job.id)["error"] == "ValueError: bad page"


def test_a_throttled_last_attempt_stays_deferred_and_is_tried_again(setup, admin, schema, clock):
    answers = iter([ValueError("bad page"), JobThrottled("slow down", retry_after=30), ValueError("bad page")])

    def handler(job):
        raise next(answers)

    _, slot = setup(products(handler), max_attempts=1)
    worker = slot()
    assert worker.run_one().outcome is Outcome.DEFERRED
    clock.advance(MINUTE)
    throttled = worker.run_one()
    row = job_row(admin, schema, throttled.job.id)
    assert (row["status"], row["attempt_count"], row["next_run_at"] - clock.now) == (
        "deferred",
        2,
        timedelta(seconds=30),
    )
    clock.advance(timedelta(seconds=30))
    assert worker.run_one().outcome is Outcome.ABANDONED  # the last attempt, really made, failed
    assert job_row(admin, schema, throttled.job.id)["error"] == "ValueError: bad page"


def test_throttled_without_a_named_wait_uses_the_throttle_delay(setup, admin, schema, clock):
    _, slot = setup(products(failing(JobThrottled("429 from the shop"))))
    worker = slot()
    delays = []
    for _ in range(4):
        result = worker.run_one()
        row = job_row(admin, schema, result.job.id)
        delays.append(row["next_run_at"] - clock.now)
        clock.advance(row["next_run_at"] - clock.now)
    assert delays == [5 * MINUTE, 10 * MINUTE, 20 * MINUTE, 30 * MINUTE]
    assert row["error"] == "JobThrottled: 429 from the shop"


def test_throttled_with_a_named_wait_waits_exactly_that(setup, admin, schema, clock):
    _, slot = setup(products(failing(JobThrottled("slow down", retry_after=17))))
    result = slot().run_one()
    row = job_row(admin, schema, result.job.id)
    assert (row["status"], row["next_run_at"] - clock.now) == ("failed", timedelta(seconds=17))


def test_an_abandon_exception_abandons_at_once_keeping_the_cursor(setup, admin, schema):
    def handler(job):
        if job.cursor is None:
            return Page("50", 50)
        raise JobAbandoned("access revoked")

    _, slot = setup(products(handler))
    result = slot().run_one()
    row = job_row(admin, schema, result.job.id)
    assert (row["status"], row["attempt_count"], row["cursor"], row["processed_count"]) == ("abandoned", 1, "50", 50)
    assert row["error"] == "JobAbandoned: access revoked"


def test_a_failure_keeps_the_cursor_and_the_retry_continues_from_it(setup, admin, schema, clock):
    calls = Recorder(paged(150, 50))
    broken = {"page": "50"}

    def handler(job):
        if job.cursor == broken["page"]:
            broken["page"] = None
            raise ConnectionError("503 from the shop")
        return calls(job)

    _, slot = setup(products(handler))
    worker = slot()
    first = worker.run_one()
    row = job_row(admin, schema, first.job.id)
    assert (row["status"], row["cursor"], row["processed_count"]) == ("failed", "50", 50)
    clock.advance(MINUTE)
    second = worker.run_one()
    row = job_row(admin, schema, second.job.id)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", 150, 2)
    assert [cursor for _, cursor in calls.calls] == [None, "50", "100"]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (None, "handler of job type 'products' returned NoneType None, expected a Page"),
        (("next", 3), "returned tuple ('next', 3), expected a Page"),
        (Page(123, 5), "returned a next_cursor of type int (123), expected str or None"),
        (Page("x", -1), "returned count -1, expected an integer of zero or more"),
        (Page("x", 2.5), "returned count 2.5, expected an integer of zero or more"),
    ],
)
def test_a_bad_handler_result_fails_the_job_clearly_and_leaves_the_row_consistent(
    setup, admin, schema, returned, message
):
    _, slot = setup(products(lambda job: returned))
    result = slot().run_one()
    row = job_row(admin, schema, result.job.id)
    assert row["status"] == "failed"
    assert row["error"].startswith("HandlerResultError: ") and message in row["error"]
    assert (row["leased_by"], row["lease_expires_at"], row["cursor"], row["processed_count"]) == (None, None, None, 0)


def test_graceful_stop_hands_the_job_back_pending_with_its_cursor(setup, admin, schema):
    stop = threading.Event()
    inner = paged(500, 50)

    def handler(job):
        if job.cursor == "100":
            stop.set()  # the worker is asked to stop while this page is in flight
        return inner(job)

    _, slot = setup(products(handler))
    result = slot(stop=stop).run_one()

    assert result.outcome is Outcome.RELEASED
    row = job_row(admin, schema, result.job.id)
    assert (row["status"], row["cursor"], row["processed_count"], row["attempt_count"]) == ("pending", "150", 150, 0)
    assert row["leased_by"] is None


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_inside_a_handler_releases_the_job_and_propagates(setup, admin, schema, interrupt):
    def handler(job):
        if job.cursor == "50":
            raise interrupt()
        return Page("50", 50)

    _, slot = setup(products(handler))
    with pytest.raises(interrupt):
        slot().run_one()
    [row] = rows(admin, schema)
    assert (row["status"], row["cursor"], row["leased_by"]) == ("pending", "50", None)


def test_an_interrupt_while_a_page_runs_waits_for_the_page_to_end_before_handing_the_job_back(setup, admin, schema):
    """Ctrl-C reaches the slot's thread, not the page's: the job is handed back only once the page is over, so
    no other worker can take it while its page still sends requests."""
    ended = threading.Event()

    def slow_page(job):
        time.sleep(0.6)
        ended.set()
        return Page(None, 1)

    _, slot = setup(products(slow_page))
    worker = slot()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run_one()
        page_was_over = ended.is_set()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert page_was_over
    [row] = rows(admin, schema)
    assert (row["status"], row["leased_by"]) == ("pending", None)


def test_an_interrupt_whose_page_outlives_the_grace_leaves_the_job_running_and_writes_nothing_more(
    setup, admin, schema
):
    """A page still running 5 s after Ctrl-C may still be sending requests: the job is not handed back (another
    worker would run beside it) but left to its lease, and the page's late answer is thrown away."""
    release, returned = threading.Event(), threading.Event()

    def stuck_page(job):
        release.wait(30)
        returned.set()
        return Page(None, 1)

    _, slot = setup(products(stuck_page))
    worker = slot()
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run_one()
        waited = time.monotonic() - started
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.set()
    assert 5 <= waited < 8
    assert returned.wait(5)
    time.sleep(0.2)  # the late answer is back, and dropped
    [row] = rows(admin, schema)
    assert (row["status"], row["cursor"], row["processed_count"]) == ("running", None, 0)
    assert row["leased_by"] == worker.worker_id


def test_an_expired_lease_is_taken_over_as_a_failed_attempt_and_retried_from_its_cursor(setup, admin, schema, clock):
    takeover = {}
    cursors = []

    def handler(job):
        cursors.append(job.cursor)
        if job.cursor == "50" and not takeover:
            # The first worker stalls here long enough for its lease to expire; another takes the job over.
            takeover["stalled"] = True
            clock.advance(timedelta(minutes=6))
            takeover["result"] = second.run_one()
        return paged(200, 50)(job)

    _, slot = setup(products(handler))
    first, second = slot(), slot()
    stalled = first.run_one()

    assert stalled.outcome is Outcome.LEASE_LOST  # the old worker wrote nothing after its page
    written_off = takeover["result"]
    assert (written_off.outcome, written_off.pages) == (Outcome.FAILED, 0)
    row = job_row(admin, schema, written_off.job.id)
    assert (row["status"], row["cursor"], row["attempt_count"], row["next_run_at"] - clock.now) == (
        "failed",
        "50",
        1,
        MINUTE,
    )
    assert row["error"] == (
        f"WorkerLost: worker {first.worker_id} stopped renewing its lease at cursor '50' (lost 1 time(s) in a row)"
    )

    clock.advance(MINUTE)
    finished = second.run_one()
    assert finished.outcome is Outcome.COMPLETED
    assert cursors == [None, "50", "50", "100", "150"]  # the retry started at the saved cursor
    assert finished.job.attempt_count == 2
    row = job_row(admin, schema, finished.job.id)
    assert (row["status"], row["processed_count"]) == ("completed", 200)


def test_a_page_that_kills_its_worker_every_time_ends_abandoned_while_its_lane_goes_on(setup, admin, schema, clock):
    """Each attempt's worker dies in the page (here: takes the job and is never heard of again). The takeovers
    back off like failures, defer the job, and abandon it after its last attempt; the other job of its lane
    runs in between."""
    source = owners(Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"))
    ops, slot = setup(products(paged(50)), owner_source=source, plan=False, max_attempts=3, lease=MINUTE)
    ops.enqueue("shops", "acme-us", "products", key="poison", now=clock.now)
    survivor = slot()
    lost_workers, seen = [], []
    while True:
        dying = slot()
        job = dying.take()
        if job is None or job.owner != "acme-us":
            break  # the poison job is not taken again: abandoned
        lost_workers.append(dying.worker_id)
        if len(lost_workers) == 2:
            ops.enqueue("shops", "acme-eu", "products", key="neighbour", now=clock.now)
        clock.advance(MINUTE + timedelta(seconds=1))  # its lease lapses
        result = survivor.run_one()
        row = job_row(admin, schema, job.id)
        seen.append((result.outcome, row["status"], row["attempt_count"], row["next_run_at"] - clock.now))
        assert row["error"] == (
            f"WorkerLost: worker {dying.worker_id} stopped renewing its lease on its first page "
            f"(lost {len(lost_workers)} time(s) in a row)"
        )
        neighbour = survivor.run_one()  # the lane is free again: its other job does not wait for the poison one
        if neighbour is not None:
            assert (neighbour.job.owner, neighbour.outcome) == ("acme-eu", Outcome.COMPLETED)
        clock.advance(row["next_run_at"] - clock.now)

    assert seen == [
        (Outcome.FAILED, "failed", 1, MINUTE),
        (Outcome.FAILED, "failed", 2, 2 * MINUTE),
        (Outcome.DEFERRED, "deferred", 3, 4 * MINUTE),
        (Outcome.ABANDONED, "abandoned", 4, timedelta(0)),
    ]
    assert {r["owner"]: r["status"] for r in rows(admin, schema)} == {"acme-us": "abandoned", "acme-eu": "completed"}


def test_a_late_write_by_an_old_lease_is_refused(setup, admin, schema, clock):
    _, slot = setup(products())
    old = slot()
    job = old.take()
    clock.advance(timedelta(minutes=6))
    new = slot().take()
    assert new.id == job.id and new.leased_by != job.leased_by
    late = dict(worker=old.worker_id, now=clock.now)
    assert old.store.save_page(job.id, cursor="999", processed_count=999, lease=MINUTE, **late) is None
    assert old.store.renew_leases([(job.id, old.worker_id, MINUTE)], now=clock.now) == {}
    assert old.store.release(job.id, processed_count=999, **late) is None
    finish = Finish(job.id, JobStatus.COMPLETED, processed_count=999)
    assert old.store.finish_and_take(queue="shops", lease=MINUTE, finish=finish, take=False, **late).finished is False
    row = job_row(admin, schema, job.id)
    assert (row["status"], row["leased_by"], row["cursor"], row["processed_count"]) == (
        "running",
        new.leased_by,
        None,
        0,
    )


def test_a_take_whose_reply_was_lost_is_found_again_by_the_same_worker(setup, admin, schema):
    _, slot = setup(products())
    worker = slot()
    job = worker.take()
    again = worker.take()  # as if the first reply never arrived
    assert (again.id, again.attempt_count, again.started_at) == (job.id, 1, job.started_at)


def test_a_heartbeat_keeps_the_lease_while_a_slow_page_is_in_flight(schema, database_url, admin):
    in_flight = threading.Event()

    def slow_page(job):
        in_flight.set()
        time.sleep(1.2)
        return Page(None, 1)

    declaration = declare(schema, products(slow_page), lease=timedelta(seconds=0.6))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    worker, rival = WorkerSlot(declaration, database, "shops"), WorkerSlot(declaration, database, "shops")
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", worker.run_one()))
    thread.start()
    assert in_flight.wait(5)
    seen = set()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert rival.take() is None  # the lease never lapses while the page is in flight
        [row] = rows(admin, schema)
        seen.add(row["heartbeat_at"])
        time.sleep(0.05)
    thread.join()
    assert outcome["result"].outcome is Outcome.COMPLETED
    assert len(seen) >= 3  # renewed several times during the one page
    worker.close()
    rival.close()


def test_a_worker_whose_job_an_operator_released_leaves_its_page_within_a_renewal_interval(schema, database_url):
    """With a 6 s lease the keeper renews 2 s after the last renewal, a page save included; that renewal finds the
    job released, and the slot stops waiting for its page. (Renewing on a fixed 2 s beat put the renewal after a
    save just past a beat nearly 4 s away; the 0.9-of-a-lease distrust would have come after 5.4 s.)"""
    lease = timedelta(seconds=6)
    interval = lease.total_seconds() / 3
    released_at, hang = [], threading.Event()

    def page(job):
        if job.cursor is None:
            time.sleep(interval + 0.3)  # the save comes just after the keeper's first renewal
            return Page("1", 1)
        assert operator.release("shops", job.id)
        released_at.append(time.monotonic())
        hang.wait(30)  # a page that never notices
        return Page(None, 1)

    declaration = declare(schema, products(page), lease=lease)
    database = declaration.database(database_url)
    with Operations(declaration, database) as operator, WorkerSlot(declaration, database, "shops") as worker:
        operator.plan("shops")
        try:
            result = worker.run_one()
            left = time.monotonic()
        finally:
            hang.set()
    assert result.outcome is Outcome.LEASE_LOST
    assert left - released_at[0] < interval + 1.1  # one renewal interval, the watcher's look, the statements


def test_a_slot_that_stops_while_its_next_job_is_a_takeover_writes_the_lost_attempt_down(setup, admin, schema, clock):
    """The finish of the slot's job took over a lost worker's job as its next; the slot then stops. The lost
    attempt is written down (failed, WorkerLost, counted), not handed back as if it had never run."""

    def page_during_which_the_other_lease_lapses(job):
        clock.advance(timedelta(minutes=6))
        return Page(None, 1)

    _, slot = setup(products(page_during_which_the_other_lease_lapses), owner_source=owners("acme", "globex"))
    dead, survivor = slot(), slot()
    lost = dead.take()  # and its worker is never heard of again
    assert survivor.run_one().outcome is Outcome.COMPLETED
    assert survivor.next_job is not None and survivor.next_job.id == lost.id  # taken over as the next job

    survivor.hand_back()  # the slot stops: its maximum run time, a shutdown

    row = job_row(admin, schema, lost.id)
    assert (row["status"], row["leased_by"], row["attempt_count"]) == ("failed", None, 1)
    assert row["error"].startswith(f"WorkerLost: worker {dead.worker_id} stopped renewing its lease")
    assert survivor.summary.outcomes["failed"] == 1


def test_a_free_lane_is_found_when_the_head_of_the_queue_is_all_in_one_busy_lane(setup, admin, schema, clock):
    ops, slot = setup(orders(horizon=timedelta(days=3650)), plan=False, owner_source=owners("acme", "globex"))
    ops.plan("shops", owner="acme", now=clock.now)  # 123 acme jobs at the head of the queue
    execute(admin, schema, "UPDATE {jobs} SET window_end = window_end + interval '100 years'")
    ops.plan("shops", owner="globex", now=clock.now)
    busy = slot().take()
    assert busy.owner == "acme"
    other = slot().take()
    assert other is not None and other.owner == "globex"
    assert slot().take() is None


def test_a_deferred_job_in_an_otherwise_idle_lane_is_found_behind_a_busy_one(setup, admin, schema, clock):
    ops, slot = setup(products(), plan=False, max_attempts=1, owner_source=owners("acme", "globex"))
    for n in range(40):
        ops.enqueue("shops", "acme", "products", key=f"acme-{n}", now=clock.now)
    ops.enqueue("shops", "globex", "products", key="stuck", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET status = 'deferred', attempt_count = 1 WHERE owner = 'globex'")
    assert slot().take().owner == "acme"
    last = slot().take()
    assert (last.owner, last.attempt_count) == ("globex", 2)


def test_a_finishing_worker_takes_its_next_job_in_the_same_transaction(setup, admin, schema, clock):
    ops, slot = setup(products(), plan=False)
    for key in ("first", "second"):
        ops.enqueue("shops", "acme", "products", key=key, now=clock.now)
    worker, rival = slot(), slot()
    assert worker.run_one().job.dedup_key == "manual:first"
    # The lane was never free in between: the second job is already this worker's.
    [second] = rows(admin, schema, "dedup_key = 'manual:second'")
    assert (second["status"], second["leased_by"]) == ("running", worker.worker_id)
    assert rival.take() is None
    assert worker.run_one().job.dedup_key == "manual:second"


def test_a_slot_that_stops_hands_back_the_job_it_took_for_later(setup, admin, schema, clock):
    ops, slot = setup(products(), plan=False)
    for key in ("first", "second", "third"):
        ops.enqueue("shops", "acme", "products", key=key, now=clock.now)
    worker = slot()
    summary = worker.drain(max_jobs=1)
    assert summary.outcomes["completed"] == 1
    assert [r["status"] for r in rows(admin, schema)] == ["completed", "pending", "pending"]
    worker.run_one()
    worker.close()
    assert [r["status"] for r in rows(admin, schema)] == ["completed", "completed", "pending"]
    assert rows(admin, schema, "status = 'pending'")[0]["attempt_count"] == 0


def test_an_idle_pool_starts_on_new_jobs_as_soon_as_it_is_woken(schema, database_url):
    declaration = declare(schema, products(paged(120)), owner_source=owners("acme", "globex"))
    database = declaration.database(database_url)
    pool = WorkerPool(declaration, database, "shops", slots=2, poll_interval=timedelta(minutes=10))
    outcome = []
    working = threading.Thread(target=lambda: outcome.append(pool.run()))
    working.start()
    try:
        time.sleep(0.3)  # both slots find nothing; their next look of their own is ten minutes away
        with Operations(declaration, database) as ops:
            ops.plan("shops")
            pool.wake()
            deadline = time.monotonic() + 20
            while not ops.activity("shops").drained:
                assert time.monotonic() < deadline, "the woken slots did not start on the new jobs"
                time.sleep(0.05)
    finally:
        pool.shutdown()
        working.join()
        pool.close()
    assert outcome[0].outcomes == {"completed": 2}


LONG = 10.0
"""Seconds a pool test waits for what a wake-up makes happen at once: far less than an idle slot's own next look."""


def assert_an_idle_slot_runs_the_lane_a_busy_one_leaves(
    schema, database_url, admin, *, left: threading.Event, before_leaving: Callable[[WorkerPool], None]
) -> None:
    """Two slots, lane acme holding two jobs: one slot runs the first, the other finds the lane busy and goes idle
    (its next look of its own minutes away). ``before_leaving(pool)`` runs at the end of the first job's page,
    which also enqueues a job of globex of a type declared first: the busy slot's finish takes it and leaves lane
    acme; ``left`` is set when that job's page starts. The page waits up to LONG for acme's second job to run,
    which only the idle slot can run meanwhile: it must have, and every job ends completed."""
    second_ran = threading.Event()
    waited: list[bool] = []

    def acme(job):
        if job.dedup_key == "manual:first":
            before_leaving(pool)
            ops.enqueue("shops", "globex", "urgent", key="urgent")
        else:
            second_ran.set()
        return Page(None, 1)

    def globex(job):
        left.set()
        waited.append(second_ran.wait(LONG))
        return Page(None, 1)

    declaration = declare(
        schema,
        SnapshotType("urgent", globex, every=timedelta(days=1)),
        products(acme),
        owner_source=owners("acme", "globex"),
    )
    database = declaration.database(database_url)
    pool = WorkerPool(declaration, database, "shops", slots=2, poll_interval=timedelta(minutes=10))
    with Operations(declaration, database) as ops:
        for key in ("first", "second"):
            ops.enqueue("shops", "acme", "products", key=key)
        working = Background(pool.run, name="pool")
        try:
            assert left.wait(LONG), "the busy slot never left lane acme"
            wait_for(lambda: waited != [] or not working.is_alive(), LONG * 2)
        finally:
            pool.shutdown()
            working.result(timeout=LONG * 3)
    assert waited == [True], "acme's second job did not run while the slot that left lane acme was busy"
    assert {r["dedup_key"]: r["status"] for r in rows(admin, schema)} == {
        "manual:first": "completed",
        "manual:second": "completed",
        "manual:urgent": "completed",
    }


def wait_for(condition: Callable[[], bool], timeout: float = LONG) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_slot_that_moves_to_another_lanes_job_wakes_an_idle_slot_for_the_lane_it_left(schema, database_url, admin):
    """The idle slot is already waiting when the busy one finishes acme's first job and takes globex's: it is
    woken, and runs acme's second job while globex's page still runs."""
    assert_an_idle_slot_runs_the_lane_a_busy_one_leaves(
        schema,
        database_url,
        admin,
        left=threading.Event(),
        before_leaving=lambda pool: wait_for(lambda: pool.idle_waits == 1),  # counted just before it waits
    )


def test_a_wake_up_between_a_slots_take_and_its_wait_is_not_missed(schema, database_url, admin, monkeypatch):
    """The idle slot's take found lane acme busy; while it looks at the queue, before its wait, the busy slot leaves
    the lane and wakes an idle slot, when none is waiting to hear it. The wake-up is not lost: the slot does not
    start its wait, takes again, and runs acme's second job while globex's page still runs."""
    looked, left = threading.Event(), threading.Event()
    wakeup = Store.wakeup

    def the_busy_slot_leaves_meanwhile(store, *args, **kwargs):
        look = wakeup(store, *args, **kwargs)  # acme's first job is still running: nothing to take
        if not looked.is_set():  # the idle slot's first look, between its take and its wait
            looked.set()
            assert left.wait(LONG), "the busy slot did not leave lane acme"
        return look

    def once_the_idle_slot_looks(pool: WorkerPool) -> None:
        assert looked.wait(LONG), "the idle slot did not look at the queue"

    monkeypatch.setattr(Store, "wakeup", the_busy_slot_leaves_meanwhile)
    assert_an_idle_slot_runs_the_lane_a_busy_one_leaves(
        schema, database_url, admin, left=left, before_leaving=once_the_idle_slot_looks
    )


def test_drain_leaves_retries_waiting_and_run_until_settled_waits_them_out(schema, database_url, admin):
    answers = {"acme": [JobThrottled("429", retry_after=0.3), RuntimeError("503")], "globex": [JobAbandoned("gone")]}

    def handler(job):
        if answers[job.owner]:
            raise answers[job.owner].pop(0)
        return Page(None, 1)

    declaration = declare(
        schema, products(handler), owner_source=owners("acme", "globex"), retry_delay=timedelta(milliseconds=200)
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    pool = WorkerPool(declaration, database, "shops", slots=2)

    drained = pool.drain()
    assert drained.outcomes == {"failed": 1, "abandoned": 1}  # nothing more was due at that moment
    assert {r["owner"]: r["status"] for r in rows(admin, schema)} == {"acme": "failed", "globex": "abandoned"}

    settled = pool.run_until_settled()
    assert settled.outcomes == {"failed": 1, "completed": 1}
    assert {r["owner"]: r["status"] for r in rows(admin, schema)} == {"acme": "completed", "globex": "abandoned"}


def test_run_until_settled_needs_time_to_pass(setup, clock):
    ops, _ = setup(products())
    pool = WorkerPool(ops.synclane, ops.session.database, "shops", clock=clock)
    with pytest.raises(ValueError, match="with a pinned clock use drain"):
        pool.run_until_settled()


def test_a_job_cancelled_after_its_slot_took_it_for_later_is_abandoned_without_a_page(setup, admin, schema, clock):
    """The slot's finish took acme's next job; the account is disconnected before the slot runs it: the job ends
    abandoned with the cancel's reason, and not one page is requested for it."""
    handler = Recorder(paged(0))
    ops, slot = setup(products(handler), plan=False)
    for key in ("first", "second"):
        ops.enqueue("shops", "acme", "products", key=key, now=clock.now)
    worker = slot()
    assert worker.run_one().outcome is Outcome.COMPLETED
    held = worker.next_job
    assert ops.cancel("shops", "acme", "account disconnected", now=clock.now).stopping == 1
    result = worker.run_one()
    assert (result.job.id, result.outcome, result.pages) == (held.id, Outcome.ABANDONED, 0)
    assert [job_id for job_id, _ in handler.calls] == [held.id - 1]
    row = job_row(admin, schema, held.id)
    assert (row["status"], row["error"], row["stop_reason"]) == ("abandoned", "Cancelled: account disconnected", None)


def test_a_job_cancelled_while_it_waits_out_a_throttle_on_its_lane_is_abandoned_without_a_page(
    setup, admin, schema, clock
):
    """A throttle holds acme's lane for two seconds; acme's job, enqueued meanwhile, is taken and waits the pause out.
    The account is disconnected while it waits: the job ends abandoned, and its page is never requested."""
    handler = Recorder(paged(0))
    ops, slot = setup(products(handler), plan=False)
    worker = slot()
    worker.store.throttle_lane("shops", "acme", wait=timedelta(seconds=2), now=clock.now)
    ops.enqueue("shops", "acme", "products", key="now", now=clock.now)
    working = Background(worker.run_one, name="slot")
    deadline = time.monotonic() + 30
    while not rows(admin, schema, "status = 'running'"):  # taken: now waiting out the pause
        assert time.monotonic() < deadline, "the job was never taken"
        time.sleep(0.01)
    assert ops.cancel("shops", "acme", "account disconnected", now=clock.now).stopping == 1
    result = working.result()
    assert (result.outcome, result.pages, result.error, handler.calls) == (
        Outcome.ABANDONED,
        0,
        "Cancelled: account disconnected",
        [],
    )
    [row] = rows(admin, schema)
    assert (row["status"], row["stop_reason"], row["leased_by"]) == ("abandoned", None, None)
