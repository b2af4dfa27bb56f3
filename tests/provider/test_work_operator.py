"""The worker operator against real PostgreSQL: drain, defer, resume, end; stops, failures and a lost database."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from psycopg import sql

from synclane_provider.core import DatabaseUnavailableError
from synclane_provider.core.db.wakeups import waiter_key
from synclane_provider.core.schema import create_schema
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.operators.work import DEFER_GRACE, SETTLE, SyncLaneWorkOperator
from synclane_provider.triggers.due import JobDueTrigger
from tests.provider.conftest import DECLARATION
from tests.support import provider_declaration as decl
from tests.support.helpers import rows
from tests.support.provider_helpers import first_event, operations

pytestmark = pytest.mark.airflow


JOBS_PER_SLOT = pytest.mark.parametrize("jobs_per_slot", [1, 4], ids=["one job a slot", "4 jobs a slot"])
"""The worker operator's promises hold whether its slot runs one job at a time or several."""


def worker(**kwargs) -> SyncLaneWorkOperator:
    settings = dict(
        task_id="work", declaration=DECLARATION, synclane_queue="shops", idle_timeout=30, deferrable=True, linger=0
    )
    settings.update(kwargs)
    return SyncLaneWorkOperator(**settings)


def plan(queue: str = "shops") -> int:
    """Plans ``queue``; returns how many jobs it inserted (for ``shops``, what a first plan gives it now)."""
    start = datetime.now(timezone.utc)
    with operations(decl.synclane) as ops:
        total = ops.plan(queue).total
    assert total > 0 and (queue != "shops" or total in decl.planned_between(start, datetime.now(timezone.utc)))
    return total


def statuses(admin, schema) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows(admin, schema):
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return counts


@JOBS_PER_SLOT
def test_the_worker_drains_then_defers_and_resumes_when_a_job_becomes_due(
    provider_schema, admin, capsys, jobs_per_slot
):
    jobs = plan()
    operator = worker(slot=1, jobs_per_slot=jobs_per_slot)
    before = datetime.now(timezone.utc)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({})

    # Everything ran except the throttled job, which is due again in a moment: the task defers.
    assert statuses(admin, provider_schema) == {"completed": jobs - 1, "failed": 1}
    trigger = deferred.value.trigger
    assert isinstance(trigger, JobDueTrigger)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert classpath == "synclane_provider.triggers.due.JobDueTrigger"
    assert {k: kwargs[k] for k in ("synclane_conn_id", "schema", "queue", "poll_interval")} == {
        "synclane_conn_id": "synclane_default",
        "schema": provider_schema,
        "queue": "shops",
        "poll_interval": 1.0,
    }
    assert before + timedelta(seconds=29) < kwargs["until"] <= datetime.now(timezone.utc) + timedelta(seconds=30)
    assert deferred.value.timeout > timedelta(seconds=29) + DEFER_GRACE - timedelta(seconds=1)
    # Its trigger reports nothing until the deferral has settled in Airflow.
    assert kwargs["settle_until"] - datetime.now(timezone.utc) > SETTLE - timedelta(seconds=5)
    carried = kwargs["carry"]
    assert carried["summary"]["jobs"] == jobs and carried["summary"]["failed"] == 1 and carried["deferrals"] == 1

    # The trigger fires when the throttled job is due; the task resumes, runs it, and defers again.
    event = first_event(trigger)
    assert event["status"] == "due"
    with pytest.raises(TaskDeferred) as again:
        operator.execute_complete({}, event)
    assert statuses(admin, provider_schema) == {"completed": jobs}
    later = again.value.trigger.serialize()[1]
    assert later["carry"]["summary"]["completed"] == jobs and later["carry"]["deferrals"] == 2

    # Nothing more comes: the trigger times out and the task ends with its totals.
    summary = operator.execute_complete({}, {**event, "status": "timeout", "carry": later["carry"]})
    assert summary == {
        "queue": "shops",
        "slot": 1,
        "jobs": jobs + 1,
        "completed": jobs,
        "failed": 1,
        "deferred": 0,
        "abandoned": 0,
        "released": 0,
        "paused": 0,
        "lease_lost": 0,
        "left_running": 0,
        "repeated": 0,
        "pages": 2 * jobs,
        "records": 100 * jobs,
        "deferrals": 2,
        "ended": "idle_timeout",
        "arrivals": summary["arrivals"],
    }
    assert {t: sum(o["jobs"] for o in owners.values()) for t, owners in summary["arrivals"].items()} == {
        "orders": jobs - 4,
        "products": 4,
    }
    log = capsys.readouterr().out
    job_lines = [line for line in log.splitlines() if " page(s), " in line and "#" in line]
    assert len(job_lines) == jobs + 1  # one line per job run
    # The start and the resume that ran a job each say how many jobs the slot runs at once.
    runs = "one job at a time" if jobs_per_slot == 1 else "up to 4 jobs at once, each in a lane of its own"
    assert sum(f"of queue shops runs {runs}" in line for line in log.splitlines()) == 2
    assert any("globex/products" in line and "failed after 0 page(s)" in line and "429" in line for line in job_lines)
    assert any("acme-us/orders [" in line and "completed after 2 page(s), 100 record(s)" in line for line in job_lines)


def test_a_slot_runs_a_job_due_within_its_linger_in_the_same_try_instead_of_deferring(provider_schema, admin):
    jobs = plan()
    operator = worker(linger=decl.THROTTLE_SECONDS + 3)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({})
    # The throttled job came due seconds after the rest: this try waited for it and ran it, then, idle for
    # its linger, deferred once.
    assert statuses(admin, provider_schema) == {"completed": jobs}
    carried = deferred.value.trigger.serialize()[1]["carry"]
    assert (carried["summary"]["jobs"], carried["deferrals"]) == (jobs + 1, 1)


def test_a_lingering_slot_wakes_on_notify_and_stops_when_airflow_stops_it(provider_schema, admin):
    operator = worker(linger=60)
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(operator.execute, {})
        wait_for(lambda: operator._worker is not None)
        jobs = plan()  # jobs inserted while the slot lingers: the NOTIFY wakes it
        wait_for(lambda: running.done() or statuses(admin, provider_schema).get("completed", 0) >= jobs - 1)
        assert not running.done(), running.exception()  # still lingering: its failure shows here, not as a timeout
        operator.on_kill()
        with pytest.raises(AirflowException, match="stopped by Airflow"):
            running.result(timeout=10)


def test_a_lingering_slot_waits_for_a_dropped_schema_and_runs_the_jobs_of_the_new_one(provider_schema, admin):
    operator = worker(linger=60)
    wait_for(lambda: not listening(admin, provider_schema))  # no waiter of an earlier test is still in line
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(operator.execute, {})
        wait_for(lambda: listening(admin, provider_schema))  # it found nothing and waits, listening
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(provider_schema)))
        time.sleep(1.0)  # it looks at a schema that is not there, and waits
        assert not running.done(), running.result()
        create_schema(admin, provider_schema)  # as the next planning run does
        jobs = plan()
        wait_for(lambda: running.done() or statuses(admin, provider_schema).get("completed", 0) >= jobs - 1)
        assert not running.done(), running.exception()  # still lingering: its failure shows here, not as a timeout
        operator.on_kill()
        with pytest.raises(AirflowException, match="stopped by Airflow"):
            running.result(timeout=10)


def test_a_resumed_slot_lingers_from_its_resume_before_deferring_again(provider_schema, admin, capsys):
    """A slot idle for five minutes (of its ten), past its one-minute linger, is woken (a job came due, and another
    slot took it first). It does not defer again at once: it waits here, listening, for a linger from its resume; a job
    planned meanwhile runs in this try."""
    operator = worker(linger=60, idle_timeout=600)
    idle_since = (datetime.now(timezone.utc) - timedelta(minutes=5)).isoformat()
    carry = {"started_at": idle_since, "idle_since": idle_since, "summary": {}, "deferrals": 1}
    wait_for(lambda: not listening(admin, provider_schema))  # no waiter of an earlier test is still in line
    with ThreadPoolExecutor(max_workers=1) as pool:
        resumed = datetime.now(timezone.utc)
        running = pool.submit(operator.execute_complete, {}, {"status": "due", "carry": carry})
        wait_for(lambda: running.done() or listening(admin, provider_schema))
        assert not running.done(), running.exception()  # a deferral shows here as TaskDeferred
        jobs = plan()
        wait_for(lambda: running.done() or statuses(admin, provider_schema).get("completed", 0) >= jobs - 1)
        assert not running.done(), running.exception()
        operator.on_kill()
        with pytest.raises(AirflowException, match="stopped by Airflow"):
            running.result(timeout=10)
    [until] = re.findall(r"waiting here for a job until (\S+), then deferring", capsys.readouterr().out)[:1]
    assert datetime.fromisoformat(until) >= resumed + timedelta(seconds=59)


def test_a_slot_whose_idle_timeout_comes_before_its_linger_ends_says_it_will_end_not_defer(provider_schema, capsys):
    summary = worker(linger=60, idle_timeout=2).execute({})
    assert (summary["jobs"], summary["ended"]) == (0, "idle_timeout")
    log = capsys.readouterr().out
    assert re.search(r"waiting here for a job until \S+, then ending", log), log
    assert "then deferring" not in log


def test_an_on_kill_before_the_slot_exists_stops_the_task_before_it_runs_any_job(provider_schema, admin, monkeypatch):
    """Airflow's SIGTERM lands while the task is still connecting, before it has a worker slot to interrupt: the
    slot it then makes takes nothing, and the task fails as stopped, every job still pending and unleased."""
    jobs = plan()
    operator = worker()
    get_database = SyncLaneHook.get_database

    def killed_while_connecting(hook, declaration):
        operator.on_kill()  # as the task runner's SIGTERM handler does, in the middle of execute
        return get_database(hook, declaration)

    monkeypatch.setattr(SyncLaneHook, "get_database", killed_while_connecting)
    with pytest.raises(AirflowException, match="stopped by Airflow"):
        operator.execute({})
    assert statuses(admin, provider_schema) == {"pending": jobs}
    assert [r["leased_by"] for r in rows(admin, provider_schema) if r["leased_by"]] == []
    assert decl.PAGES == []


def listening(admin, schema: str, queue: str = "shops") -> bool:
    """Whether a waiter of the queue holds its place in line: a lingering slot's trigger, after its first look."""
    key = waiter_key(schema, queue)
    return bool(
        admin.execute(
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s"
            " AND objsubid = 2",
            list(key),
        ).fetchone()["n"]
    )


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_trigger_error_fails_the_task_with_its_message(provider_schema):
    operator = worker()
    carry = {
        "started_at": "2026-11-30T10:00:00+00:00",
        "idle_since": "2026-11-30T10:00:00+00:00",
        "summary": {},
        "deferrals": 1,
    }
    with pytest.raises(AirflowException, match="OperationalError: connection refused"):
        operator.execute_complete(
            {}, {"status": "error", "message": "OperationalError: connection refused", "carry": carry}
        )


def test_without_deferral_the_worker_polls_and_ends_after_the_idle_timeout(provider_schema, admin):
    jobs = plan()
    summary = worker(deferrable=False, idle_timeout=decl.THROTTLE_SECONDS + 2).execute({})
    assert summary["completed"] == jobs and summary["failed"] == 1  # the throttled job was picked up by polling
    assert (summary["deferrals"], summary["ended"]) == (0, "idle_timeout")
    assert statuses(admin, provider_schema) == {"completed": jobs}


def test_two_slots_drain_the_queue_together_and_a_lane_never_runs_two_jobs(provider_schema, admin):
    jobs = plan()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(
                lambda slot: worker(slot=slot, deferrable=False, idle_timeout=decl.THROTTLE_SECONDS + 2).execute({}),
                [0, 1],
            )
        )
    assert sum(r["completed"] for r in results) == jobs
    assert all(r["jobs"] > 0 for r in results)  # both slots took part
    assert statuses(admin, provider_schema) == {"completed": jobs}
    assert decl.PAGES and decl.overlapping_lane_pages() == []


@JOBS_PER_SLOT
def test_sigterm_hands_the_running_job_back_with_its_cursor(provider_schema, admin, jobs_per_slot):
    plan("slow")
    operator = worker(synclane_queue="slow", jobs_per_slot=jobs_per_slot)
    # As in Airflow's task runner: SIGTERM calls on_kill in the main thread, in the middle of execute.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: operator.on_kill())
    decl.ON_SECOND_PAGE.append(lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        with pytest.raises(AirflowException, match="stopped by Airflow"):
            operator.execute({})
    finally:
        signal.signal(signal.SIGTERM, previous)
    [row] = rows(admin, provider_schema)
    # The page in flight finished and was saved; then the job went back, cursor kept, attempt not counted.
    assert (row["status"], row["cursor"], row["processed_count"], row["attempt_count"]) == ("pending", "100", 100, 0)
    assert row["leased_by"] is None


@JOBS_PER_SLOT
def test_on_kill_from_another_thread_hands_the_job_back(provider_schema, admin, jobs_per_slot):
    plan("slow")
    decl.GATE.clear()
    operator = worker(synclane_queue="slow", jobs_per_slot=jobs_per_slot)
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(operator.execute, {})
        assert decl.IN_FLIGHT.wait(30)
        operator.on_kill()
        decl.GATE.set()
        with pytest.raises(AirflowException, match="stopped by Airflow"):
            running.result(timeout=30)
    [row] = rows(admin, provider_schema)
    assert (row["status"], row["cursor"], row["processed_count"]) == ("pending", "100", 100)


@JOBS_PER_SLOT
def test_on_kill_during_a_page_that_does_not_end_hands_the_job_back_at_once_at_the_cursor_it_started_from(
    provider_schema, admin, jobs_per_slot
):
    plan("slow")
    decl.GATE.clear()  # the second page hangs
    operator = worker(synclane_queue="slow", jobs_per_slot=jobs_per_slot)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            running = pool.submit(operator.execute, {})
            assert decl.IN_FLIGHT.wait(30)
            operator.on_kill()
            # Airflow kills the process 5 s after on_kill: the job is back before that, not after a lease.
            with pytest.raises(AirflowException, match="stopped by Airflow"):
                running.result(timeout=5)
            [row] = rows(admin, provider_schema)
            assert (row["status"], row["cursor"], row["processed_count"]) == ("pending", "50", 50)
            assert row["leased_by"] is None and row["attempt_count"] == 0
    finally:
        decl.GATE.set()


@JOBS_PER_SLOT
def test_at_the_max_run_time_a_running_job_is_handed_back_and_the_task_succeeds(provider_schema, admin, jobs_per_slot):
    plan("slow")
    decl.SLOW_PAGE_SECONDS = 0.3  # 10 pages: about 3 s of work
    summary = worker(synclane_queue="slow", max_run_time=1, jobs_per_slot=jobs_per_slot).execute({})
    assert (summary["released"], summary["ended"]) == (1, "max_run_time")
    [row] = rows(admin, provider_schema)
    assert row["status"] == "pending" and row["cursor"] is not None
    assert 0 < row["processed_count"] == int(row["cursor"]) < 500


def test_a_lost_connection_is_reopened_and_the_job_continues(provider_schema, admin, connection):
    plan("slow")
    decl.GATE.clear()
    name = f"synclane-worker-{os.getpid()}-{threading.get_ident()}"
    operator = worker(
        synclane_queue="slow", synclane_conn_id=connection(application_name=name), idle_timeout=1, deferrable=False
    )
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(operator.execute, {})
        assert decl.IN_FLIGHT.wait(30)
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE application_name = %s", [name]
        ).fetchone()["n"]
        decl.GATE.set()
        summary = running.result(timeout=60)
    assert killed >= 1
    assert (summary["completed"], summary["records"]) == (1, 500)
    [row] = rows(admin, provider_schema)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", 500, 1)


def test_the_task_fails_when_the_database_stays_unreachable(provider_schema, connection):
    operator = worker(synclane_conn_id=connection(port=1), give_up_after=timedelta(seconds=1))
    with pytest.raises(DatabaseUnavailableError, match="unreachable"):
        operator.execute({})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(idle_timeout=0), "idle_timeout must be positive"),
        (
            dict(max_run_time="soon"),
            "max_run_time must be a duration: a timedelta, a number of seconds, or text like 90s",
        ),
    ],
)
def test_bad_durations_fail_when_the_dag_is_parsed(settings, message):
    with pytest.raises(ValueError, match=message):
        worker(**settings)
