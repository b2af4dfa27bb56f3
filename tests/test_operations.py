"""Operations for application code: enqueue, requeue, cancel, list, progress."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import (
    Activity,
    Database,
    DeclarationError,
    JobStatus,
    Operations,
    Owner,
    Page,
    PinnedClock,
    UnknownOwnerError,
    UnknownQueueError,
    WorkerSlot,
)
from synclane_provider.core.errors import UnknownJobTypeError
from synclane_provider.core.run.runner import Outcome
from tests.support.fault_tools import wait_for
from tests.support.helpers import Background, declare, execute, failing, orders, owners, paged, products, rows

UTC = timezone.utc


@pytest.fixture
def declaration(schema):
    return declare(schema, products(), orders(), owner_source=owners("acme", "globex"))


@pytest.fixture
def ops(declaration, database_url):
    with Operations(declaration, declaration.database(database_url)) as operations:
        yield operations


def test_enqueue_by_hand_is_deduplicated_by_window(ops, admin, schema, clock):
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    job = ops.enqueue("shops", "acme", "orders", window_start=start, window_end=end, now=clock.now)
    assert (job.mode.value, job.status, job.priority, job.lane) == ("manual", JobStatus.PENDING, 1, "acme")
    assert job.dedup_key == "manual:2026-01-01T00:00:00Z/2026-01-02T00:00:00Z"
    assert ops.enqueue("shops", "acme", "orders", window_start=start, window_end=end, now=clock.now) is None
    assert len(rows(admin, schema)) == 1


def test_enqueue_with_a_key_and_a_start_time(ops, clock):
    job = ops.enqueue(
        "shops",
        "acme",
        "products",
        key="refresh-after-support-ticket",
        run_at=clock.now + timedelta(hours=1),
        now=clock.now,
    )
    assert (job.dedup_key, job.lane, job.next_run_at) == (
        "manual:refresh-after-support-ticket",
        "acme",
        clock.now + timedelta(hours=1),
    )


def test_a_hand_job_runs_in_the_lane_the_owner_source_gives_its_owner(schema, database_url, admin, clock):
    shared = declare(
        schema, products(), owner_source=owners(Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"))
    )
    with Operations(shared, shared.database(database_url)) as ops:
        job = ops.enqueue("shops", "acme-us", "products", key="by-hand", now=clock.now)
        assert job.lane == "acme"
        assert ops.enqueue("shops", "acme-eu", "products", key="by-hand", lane="acme", now=clock.now).lane == "acme"
        with pytest.raises(DeclarationError, match="owner 'acme-us' is in lane 'acme' according to the owner source"):
            ops.enqueue("shops", "acme-us", "products", key="elsewhere", lane="acme-us", now=clock.now)
        with pytest.raises(
            UnknownOwnerError, match="owner 'acme-uk' is not listed by the owner source of queue 'shops'"
        ):
            ops.enqueue("shops", "acme-uk", "products", key="not-connected", now=clock.now)
        assert (
            ops.enqueue("shops", "acme-uk", "products", key="not-connected", lane="acme", now=clock.now).lane == "acme"
        )
    assert [r["lane"] for r in rows(admin, schema)] == ["acme", "acme", "acme"]


def test_a_hand_job_never_runs_beside_a_job_of_its_lane(schema, database_url, clock):
    shared = declare(
        schema, products(), owner_source=owners(Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"))
    )
    database = shared.database(database_url)
    with (
        Operations(shared, database) as ops,
        WorkerSlot(shared, database, "shops", clock=clock) as first,
        WorkerSlot(shared, database, "shops", clock=clock) as second,
    ):
        ops.enqueue("shops", "acme-eu", "products", key="planned-elsewhere", now=clock.now)
        ops.enqueue("shops", "acme-us", "products", key="by-hand", now=clock.now)
        assert first.take().owner in ("acme-eu", "acme-us")
        assert second.take() is None  # the other owner's job waits: one rate limit, one lane


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"queue": "nope"}, UnknownQueueError, "unknown queue 'nope'"),
        ({"type": "invoices"}, UnknownJobTypeError, "no job type 'invoices'"),
        ({"owner": ""}, DeclarationError, "owner id must be a non-empty string"),
        (
            {"window_start": datetime(2026, 1, 2, tzinfo=UTC), "window_end": datetime(2026, 1, 1, tzinfo=UTC)},
            DeclarationError,
            "must be before window_end",
        ),
        ({"window_start": datetime(2026, 1, 2, tzinfo=UTC)}, DeclarationError, "give both window_start and window_end"),
        (
            {"window_start": datetime(2026, 1, 1), "window_end": datetime(2026, 1, 2)},
            DeclarationError,
            "window_start must be a timezone-aware datetime, got datetime.datetime.2026, 1, 1, 0, 0.",
        ),
        ({"key": "k", "run_at": datetime(2026, 1, 1)}, DeclarationError, "run_at must be a timezone-aware datetime"),
        ({"key": "no-window"}, DeclarationError, "job type 'orders' is windowed: give the window_start and window_end"),
        (
            {
                "type": "products",
                "window_start": datetime(2026, 1, 1, tzinfo=UTC),
                "window_end": datetime(2026, 1, 2, tzinfo=UTC),
            },
            DeclarationError,
            "job type 'products' is a snapshot: its jobs have no window",
        ),
    ],
)
def test_enqueue_refuses_bad_input_by_name(ops, admin, schema, arguments, error, message):
    ops.activity("shops")  # the table exists, and stays empty
    call = {"queue": "shops", "owner": "acme", "type": "orders", **arguments}
    with pytest.raises(error, match=message):
        ops.enqueue(call.pop("queue"), call.pop("owner"), call.pop("type"), **call)
    assert rows(admin, schema) == []


def test_requeue_gives_stopped_jobs_fresh_attempts_from_their_cursors(declaration, database_url, admin, schema, clock):
    def broken_second_page(job):
        if job.cursor is None:
            return Page("50", 50)
        raise RuntimeError("the shop returned a page that could not be read")

    broken = declare(schema, products(broken_second_page), owner_source=owners("acme"), max_attempts=1)
    database = broken.database(database_url)
    ops = Operations(broken, database)
    ops.plan("shops", now=clock.now)
    worker = WorkerSlot(broken, database, "shops", clock=clock)
    assert worker.run_one().outcome is Outcome.DEFERRED
    clock.advance(timedelta(minutes=1))
    assert worker.run_one().outcome is Outcome.ABANDONED

    assert ops.requeue("shops", owner="acme", now=clock.now) == 1
    [row] = rows(admin, schema)
    assert (row["status"], row["attempt_count"], row["cursor"], row["processed_count"]) == ("pending", 0, "50", 50)

    healed = declare(schema, products(paged(120, 50)), owner_source=owners("acme"))
    result = WorkerSlot(healed, database, "shops", clock=clock).run_one()
    assert (result.outcome, result.job.cursor) == (Outcome.COMPLETED, "100")
    [row] = rows(admin, schema)
    assert (row["status"], row["processed_count"], row["error"]) == ("completed", 120, None)


def test_requeue_touches_only_stopped_jobs_of_the_named_owner(ops, admin, schema, clock):
    ops.plan("shops", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET status = 'failed', attempt_count = 3 WHERE type = 'products'")
    execute(admin, schema, "UPDATE {jobs} SET status = 'completed' WHERE type = 'orders' AND owner = 'acme'")
    assert ops.requeue("shops", owner="globex", now=clock.now) == 1
    statuses = {(r["owner"], r["type"], r["status"]) for r in rows(admin, schema)}
    assert ("acme", "products", "failed") in statuses
    assert ("globex", "products", "pending") in statuses
    assert ("acme", "orders", "completed") in statuses


def test_requeue_brings_forward_a_pending_job_set_to_run_far_later(ops, admin, schema, clock):
    ops.plan("shops", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET next_run_at = now() + interval '30 days' WHERE owner = 'acme'")
    due_already = {r["id"] for r in rows(admin, schema, "owner = 'globex'")}

    brought_forward = ops.requeue("shops", owner="acme", now=clock.now)

    assert brought_forward == len(rows(admin, schema, "owner = 'acme'")) > 0
    assert {r["next_run_at"] for r in rows(admin, schema, "owner = 'acme'")} == {clock.now}
    assert ops.requeue("shops", owner="globex", now=clock.now) == 0  # already due: nothing to bring forward
    assert {r["id"] for r in rows(admin, schema, "owner = 'globex'")} == due_already


def test_requeue_count_counts_the_stopped_jobs_requeued_and_not_a_pending_job_brought_forward(
    ops, admin, schema, clock
):
    """requeue_count says how often a person gave a stopped job another go (the health check calls a window
    abandoned again after several a stuck window); moving a waiting job's time is not such a go."""
    ops.plan("shops", now=clock.now)
    stopped = ["failed", "deferred", "abandoned"]
    jobs = rows(admin, schema, "type = 'orders'")
    for job, status in zip(jobs, stopped):
        execute(admin, schema, "UPDATE {jobs} SET status = %s, error = 'E: 500' WHERE id = %s", [status, job["id"]])
    later = jobs[len(stopped)]["id"]
    execute(admin, schema, "UPDATE {jobs} SET next_run_at = %s WHERE id = %s", [clock.now + timedelta(days=30), later])

    assert ops.requeue("shops", now=clock.now) == len(stopped) + 1
    assert ops.requeue("shops", now=clock.now) == 0  # all due now: nothing to requeue or bring forward
    counts = {row["id"]: row["requeue_count"] for row in rows(admin, schema)}
    assert [counts[job["id"]] for job in jobs[: len(stopped)]] == [1, 1, 1]
    assert counts[later] == 0
    assert set(counts.values()) == {0, 1} and sum(counts.values()) == len(stopped)


def test_a_requeued_job_shows_its_last_error_until_it_completes(ops, admin, schema, clock):
    ops.plan("shops", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET status = 'abandoned', error = 'HTTP 500' WHERE type = 'products'")
    ops.requeue("shops", now=clock.now)
    assert {r["error"] for r in rows(admin, schema, "type = 'products'")} == {"HTTP 500"}


def test_cancel_abandons_waiting_jobs_now_and_marks_the_running_one_to_stop(
    ops, admin, schema, clock, declaration, database_url
):
    ops.plan("shops", now=clock.now)
    with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
        running = slot.take()
    assert running.owner == "acme"

    cancelled = ops.cancel("shops", "acme", "account disconnected")

    acme = rows(admin, schema, "owner = 'acme'")
    assert (cancelled.abandoned, cancelled.stopping, cancelled.total) == (len(acme) - 1, 1, len(acme))
    assert {r["status"] for r in acme if r["id"] != running.id} == {"abandoned"}
    assert {r["error"] for r in acme if r["id"] != running.id} == {"Cancelled: account disconnected"}
    [still] = [r for r in acme if r["id"] == running.id]
    assert (still["status"], still["stop_reason"]) == ("running", "Cancelled: account disconnected")
    assert {r["status"] for r in rows(admin, schema, "owner = 'globex'")} == {"pending"}


def test_a_cancel_that_waits_for_a_take_of_one_of_its_jobs_asks_the_job_taken_to_stop(
    ops, admin, schema, clock, database_url
):
    """The cancel's snapshot still shows the job waiting; by the time it may write the row, the job runs."""
    ops.plan("shops", now=clock.now)
    [taken, *rest] = rows(admin, schema, "owner = 'acme'")
    with psycopg.connect(database_url) as taker:  # a take of the job, not yet committed
        taker.execute(
            sql.SQL(
                "UPDATE {}.jobs SET status = 'running', lane_slot = 0, leased_by = 'taker',"
                " lease_expires_at = now() + interval '5 minutes' WHERE id = %s"
            ).format(sql.Identifier(schema)),
            [taken["id"]],
        )
        cancel = Background(lambda: ops.cancel("shops", "acme", "account disconnected"), name="cancel")
        wait_for(lambda: blocked_by(admin, taker.info.backend_pid), "the cancel to wait for the taken row")
        taker.commit()
    cancelled = cancel.result()

    [row] = rows(admin, schema, "id = %s", [taken["id"]])
    assert (row["status"], row["stop_reason"]) == ("running", "Cancelled: account disconnected")
    assert (cancelled.abandoned, cancelled.stopping) == (len(rest), 1)


def blocked_by(admin, pid: int) -> bool:
    """Whether some backend waits for a lock ``pid`` holds."""
    row = admin.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid])
    return row.fetchone()["n"] > 0


def test_cancel_asks_only_the_named_owners_running_job_to_stop(ops, admin, schema, clock, declaration, database_url):
    ops.plan("shops", now=clock.now)
    database = declaration.database(database_url)
    with (
        WorkerSlot(declaration, database, "shops", clock=clock) as first,
        WorkerSlot(declaration, database, "shops", clock=clock) as second,
    ):
        running = {job.owner: job for job in (first.take(), second.take())}
    assert set(running) == {"acme", "globex"}

    assert ops.cancel("shops", "acme", "account disconnected").stopping == 1

    [globex] = rows(admin, schema, "id = %s", [running["globex"].id])
    assert (globex["status"], globex["stop_reason"]) == ("running", None)


def test_cancel_of_one_type_leaves_the_owners_other_types(ops, admin, schema, clock):
    ops.plan("shops", now=clock.now)
    assert ops.cancel("shops", "acme", "orders API retired", type="orders").abandoned == 3
    assert {(r["type"], r["status"]) for r in rows(admin, schema, "owner = 'acme'")} == {
        ("products", "pending"),
        ("orders", "abandoned"),
    }
    with pytest.raises(UnknownJobTypeError):
        ops.cancel("shops", "acme", "typo", type="order")


def disconnect_acme(declaration, database) -> None:
    """What an application does when acme disconnects its account (here, while acme's page runs): cancel."""
    with Operations(declaration, database) as other:
        assert other.cancel("shops", "acme", "account disconnected").stopping == 1


def test_a_cancelled_running_job_stops_after_its_current_page_and_a_requeue_continues_it(
    schema, database_url, admin, clock
):
    cancel_during = {"cursor": "50"}

    def handler(job):
        if job.cursor == cancel_during["cursor"]:
            cancel_during["cursor"] = None
            disconnect_acme(declaration, database)
        return paged(200, 50)(job)

    declaration = declare(schema, products(handler))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        stopped = slot.run_one()
        assert (stopped.outcome, stopped.pages, stopped.error) == (
            Outcome.ABANDONED,
            2,
            "Cancelled: account disconnected",
        )
        [row] = rows(admin, schema)
        assert (row["status"], row["cursor"], row["processed_count"], row["stop_reason"]) == (
            "abandoned",
            "100",
            100,
            None,
        )

        assert ops.requeue("shops", owner="acme", now=clock.now) == 1
        finished = slot.run_one()
        assert (finished.outcome, finished.pages, finished.records) == (Outcome.COMPLETED, 2, 100)  # from cursor 100


def test_a_cancelled_job_whose_page_then_fails_ends_abandoned_with_the_cancel_not_failed_and_retried(
    schema, database_url, admin, clock
):
    """A disconnected account's next request fails (401): the cancel, not the failure, says how the job ends."""

    def handler(job):
        if job.cursor == "50":
            disconnect_acme(declaration, database)
            raise RuntimeError("401 Unauthorized")
        return paged(200, 50)(job)

    declaration = declare(schema, products(handler))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        stopped = slot.run_one()
        assert (stopped.outcome, stopped.error) == (Outcome.ABANDONED, "Cancelled: account disconnected")
        [row] = rows(admin, schema)
        assert (row["status"], row["error"], row["stop_reason"], row["cursor"]) == (
            "abandoned",
            "Cancelled: account disconnected",
            None,
            "50",
        )
        assert row["next_run_at"] == row["heartbeat_at"] == clock.now  # abandoned now, kept from now
        clock.advance(timedelta(days=1))
        assert slot.run_one() is None  # nothing to retry


def test_a_job_cancelled_while_its_slot_held_it_for_later_is_abandoned_when_the_slot_hands_it_back(
    schema, database_url, admin, clock
):
    """A slot's finish took the owner's next job; the cancel counts it as stopping; the slot then stops."""
    declaration = declare(schema, products(paged(50)), orders(), owner_source=owners("acme"))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as slot,
        WorkerSlot(declaration, database, "shops", clock=clock) as next_worker,
    ):
        ops.plan("shops", now=clock.now)
        assert slot.run_one().outcome is Outcome.COMPLETED
        held = slot.next_job
        assert held is not None and held.owner == "acme"

        assert ops.cancel("shops", "acme", "account disconnected").stopping == 1
        slot.hand_back()  # the slot stops (its maximum run time, a shutdown)

        [row] = rows(admin, schema, "id = %s", [held.id])
        assert (row["status"], row["error"], row["stop_reason"]) == (
            "abandoned",
            "Cancelled: account disconnected",
            None,
        )
        assert next_worker.run_one() is None


def test_list_jobs_by_owner_status_and_type(ops, clock):
    ops.plan("shops", now=clock.now)
    assert len(ops.list_jobs("shops")) == 8
    assert {j.owner for j in ops.list_jobs("shops", owner="globex")} == {"globex"}
    assert [j.type for j in ops.list_jobs("shops", owner="acme", type="products")] == ["products"]
    assert ops.list_jobs("shops", status="completed") == []
    assert len(ops.list_jobs("shops", status=JobStatus.PENDING, limit=3)) == 3
    with pytest.raises(ValueError, match="'done' is not a valid JobStatus"):
        ops.list_jobs("shops", status="done")


def test_progress_of_an_owners_first_load(ops, admin, schema, clock):
    ops.plan("shops", now=clock.now)
    assert not ops.progress("shops", "acme").complete
    execute(
        admin,
        schema,
        "UPDATE {jobs} SET status = 'completed', processed_count = 40 "
        "WHERE owner = 'acme' AND mode = 'initial' AND type = 'orders' AND window_end = %s",
        [datetime(2026, 11, 30, tzinfo=UTC)],
    )
    progress = ops.progress("shops", "acme")
    assert (progress.total, progress.completed, progress.records, progress.complete) == (3, 1, 40, False)
    orders_only = ops.progress("shops", "acme", type="orders")
    assert (orders_only.total, orders_only.completed, round(orders_only.fraction, 2)) == (2, 1, 0.5)
    execute(admin, schema, "UPDATE {jobs} SET status = 'completed' WHERE owner = 'acme' AND mode = 'initial'")
    assert ops.progress("shops", "acme").complete
    with pytest.raises(UnknownOwnerError, match="'nobody'"):  # a mistyped owner, rather than 0 of 0
        ops.progress("shops", "nobody")


def test_activity_says_what_is_due_running_and_next(ops, admin, schema, clock):
    assert ops.activity("shops", now=clock.now) == Activity(
        running=False, due=False, next_run_at=None, lease_expires_at=None, now=clock.now
    )
    ops.plan("shops", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET next_run_at = %s", [clock.now + timedelta(minutes=3)])
    activity = ops.activity("shops", now=clock.now)
    assert (activity.due, activity.next_run_at) == (False, clock.now + timedelta(minutes=3))
    assert ops.activity("shops", now=clock.now + timedelta(minutes=3)).due is True
    assert ops.activity("shops", lane="initech", now=clock.now + timedelta(minutes=3)).due is False


def test_errors_are_stored_bounded_and_safe(schema, database_url, admin, clock):
    huge = "x" * 100_000
    declaration = declare(schema, products(failing(RuntimeError(huge + "\x00\udcff"))))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops", now=clock.now)
    WorkerSlot(declaration, database, "shops", clock=clock).run_one()
    [row] = rows(admin, schema)
    assert row["status"] == "failed"
    assert row["error"].startswith("RuntimeError: xxx") and len(row["error"]) == 2000


def test_a_pinned_clock_given_to_operations_plans_and_schedules_at_its_time(declaration, database_url, admin, schema):
    clock = PinnedClock(datetime(2026, 11, 30, 10, 20, tzinfo=UTC))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as slot,
    ):
        assert ops.plan("shops").inserted == {"products": 2, "orders": 6}
        while slot.run_one() is not None:
            pass
        assert ops.plan("shops").total == 0
        clock.advance(timedelta(minutes=15))
        assert ops.plan("shops").inserted == {"products": 0, "orders": 2}  # the next period, no waiting for it
        [newest] = rows(admin, schema, "owner = 'acme' AND mode = 'recurring'", order="window_end DESC LIMIT 1")
        assert (newest["window_start"], newest["window_end"], newest["next_run_at"]) == (
            datetime(2026, 11, 30, 10, 10, tzinfo=UTC),
            datetime(2026, 11, 30, 10, 30, tzinfo=UTC),
            clock.now,
        )
        assert ops.activity("shops").due and ops.activity("shops").now == clock.now


def test_list_jobs_refuses_a_limit_it_cannot_honour(ops):
    for limit in (0, -1, 10_001, 2.5, True, "10"):
        with pytest.raises(ValueError, match=f"limit must be an integer from 1 to 10000, got {limit!r}"):
            ops.list_jobs("shops", limit=limit)


def test_times_are_in_utc_whatever_the_session_time_zone(schema, database_url, clock):
    seen = []

    def handler(job):
        seen.append(job)
        return paged(100)(job)

    declaration = declare(schema, products(handler))
    elsewhere = Database(
        connect=lambda: psycopg.connect(database_url, options="-c TimeZone=America/New_York"), schema=schema
    )
    with Operations(declaration, elsewhere, clock=clock) as ops, WorkerSlot(declaration, elsewhere, "shops") as slot:
        ops.plan("shops")
        slot.run_one()
        [job] = ops.list_jobs("shops")
        activity = ops.activity("shops", now=None)
    times = [job.created_at, job.next_run_at, job.completed_at, activity.now, *(j.lease_expires_at for j in seen)]
    assert len(times) == 6 and all(t.tzinfo is UTC for t in times)
    assert job.created_at == clock.now


def test_a_cancelled_job_whose_worker_was_lost_is_abandoned_by_the_worker_that_takes_it_over(
    declaration, database_url, admin, schema
):
    clock = PinnedClock(datetime(2026, 11, 30, 10, 20, tzinfo=UTC))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as lost,
        WorkerSlot(declaration, database, "shops", clock=clock) as taker,
    ):
        ops.plan("shops", owner="acme")
        job = lost.take()  # and its worker is never heard of again
        assert ops.cancel("shops", "acme", "account disconnected").stopping == 1
        clock.advance(timedelta(minutes=6))
        result = taker.run_one()
        assert (result.job.id, result.outcome, result.error) == (
            job.id,
            Outcome.ABANDONED,
            "Cancelled: account disconnected",
        )


def test_a_stop_request_does_not_outlive_its_attempt(database_url, admin, schema):
    """An operator who puts a cancelled running job back by hand gets it run, not abandoned again."""
    clock = PinnedClock(datetime(2026, 11, 30, 10, 20, tzinfo=UTC))
    declaration = declare(schema, products(paged(120)))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as slot,
    ):
        ops.plan("shops", owner="acme")
        job = slot.take()
        ops.cancel("shops", "acme", "by mistake", type=job.type)
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET status = 'pending', leased_by = NULL, lease_expires_at = NULL WHERE id = %s",
            [job.id],
        )
        again = slot.run_one()
        assert (again.job.id, again.outcome, again.pages) == (job.id, Outcome.COMPLETED, 3)


def test_an_owner_or_type_nobody_knows_is_refused_by_name_rather_than_matching_nothing(
    ops, declaration, database_url, admin, schema
):
    ops.plan("shops")
    for refused in (
        lambda: ops.list_jobs("shops", owner="acne"),
        lambda: ops.requeue("shops", owner="acne"),
        lambda: ops.cancel("shops", "acne", "account disconnected"),
        lambda: ops.progress("shops", "acne"),
    ):
        with pytest.raises(UnknownOwnerError, match="'acne'.*acme"):  # the owners listed, to show the right one
            refused()
    with pytest.raises(UnknownJobTypeError, match="'order'"):
        ops.requeue("shops", type="order")
    # An account disconnected since (no longer listed) still has its history to look at and requeue.
    gone = declare(schema, products(), orders(), owner_source=owners("acme"))
    with Operations(gone, gone.database(database_url)) as later:
        assert {job.owner for job in later.list_jobs("shops", owner="globex")} == {"globex"}
        assert later.requeue("shops", owner="globex") == 0
    assert rows(admin, schema, "owner = 'acne'") == []
