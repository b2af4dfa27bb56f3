"""Writing the ends of several attempts in one statement (finish_many), for a worker process that runs many jobs at
once: each end written exactly as finish_and_take writes it alone -- fenced on its own worker's lease, a cancel's
abandonment winning over any end but completion, the owner's health following, the landed counts kept -- with no
take, and a word on whether the lanes it left may have work.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Finish, Store
from synclane_provider.core.db.wakeups import channel
from synclane_provider.core.records import LandCounts
from synclane_provider.core.states import JobStatus
from tests.support.helpers import Background, execute, rows
from tests.support.take_table import ShopsTable, add_job

UTC = timezone.utc
NOW = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
LEASE = timedelta(minutes=5)

ENDS = {
    # lane: (how its attempt ended, whether a cancel asked it to stop first)
    "done": (Finish(0, JobStatus.COMPLETED, 7, landed=LandCounts(3, 1, 2, 1, 0)), False),
    "broke": (Finish(0, JobStatus.FAILED, 2, "HTTP 500", timedelta(minutes=3), owner_failed=True), False),
    "throttled": (Finish(0, JobStatus.FAILED, 2, "HTTP 429", timedelta(seconds=30)), False),
    "tired": (Finish(0, JobStatus.DEFERRED, 5, "again and again", timedelta(hours=1), owner_failed=True), False),
    "quit": (Finish(0, JobStatus.ABANDONED, 1, "access revoked", owner_failed=True), False),
    "done-anyway": (Finish(0, JobStatus.COMPLETED, 4), True),
    "broke-after-cancel": (Finish(0, JobStatus.FAILED, 1, "HTTP 401", timedelta(minutes=1), owner_failed=True), True),
}
"""One attempt's end of each kind, each in a lane (and of an owner) of its own."""

WRITTEN = (
    "status",
    "processed_count",
    "error",
    "next_run_at",
    "completed_at",
    "leased_by",
    "lease_expires_at",
    "stop_reason",
    "inserted_count",
    "updated_count",
    "unchanged_count",
    "stale_count",
    "deleted_count",
)
"""The columns an end writes."""


class Table(ShopsTable):
    """An empty jobs table of the queue shops, running jobs put in it, and their ends written."""

    def running(self, lane: str, *, cancelled: bool = False, worker: str | None = None) -> int:
        """A job of ``lane`` (and of the owner of its name) running for the worker ``w-<lane>``; its id."""
        add_job(self.admin, self.schema, NOW, lane, days_ago=1, status="running", running_by=worker or f"w-{lane}")
        if cancelled:
            execute(self.admin, self.schema, "UPDATE {jobs} SET stop_reason = 'disconnected' WHERE lane = %s", [lane])
        return self.job(lane)["id"]

    def job(self, lane: str) -> dict:
        [row] = rows(self.admin, self.schema, "lane = %s AND status <> 'pending'", [lane])
        return row

    def owner(self, owner: str) -> dict | None:
        return self.admin.execute(
            sql.SQL("SELECT health, consecutive_failures, last_error FROM {}.owners WHERE owner = %s").format(
                sql.Identifier(self.schema)
            ),
            [owner],
        ).fetchone()


@pytest.fixture
def table(schema, database_url, admin):
    each = Table(schema, database_url, admin)
    yield each
    each.close()


def ended(finish: Finish, job_id: int) -> Finish:
    """``finish``, for the job ``job_id``."""
    return replace(finish, job_id=job_id)


def test_each_end_is_written_as_finish_and_take_writes_it_alone(table):
    """Every kind of end twice over: once a job at a time by finish_and_take (no take), once all in one finish_many;
    the jobs' rows, their owners' rows and what each call says it wrote are the same."""
    alone, together = {}, {}
    for lane, (finish, cancelled) in ENDS.items():
        alone[lane] = ended(finish, table.running(f"alone-{lane}", cancelled=cancelled))
        together[lane] = ended(finish, table.running(f"together-{lane}", cancelled=cancelled))

    written_alone = {
        lane: table.store.finish_and_take(
            queue="shops", worker=f"w-alone-{lane}", lease=LEASE, finish=finish, take=False, now=NOW
        ).written
        for lane, finish in alone.items()
    }
    many = table.store.finish_many(
        [(f"w-together-{lane}", finish) for lane, finish in together.items()], queue="shops", now=NOW
    )

    for (lane, finish), written in zip(together.items(), many.written, strict=True):
        assert written == ended(written_alone[lane], finish.job_id), lane
        assert {c: table.job(f"together-{lane}")[c] for c in WRITTEN} == {
            c: table.job(f"alone-{lane}")[c] for c in WRITTEN
        }, lane
        assert table.owner(f"together-{lane}") == table.owner(f"alone-{lane}"), lane
    # What the rows say, for the record: a cancel wins over a failure, not over a completion.
    assert [w.status for w in many.written] == [
        JobStatus.COMPLETED,
        JobStatus.FAILED,
        JobStatus.FAILED,
        JobStatus.DEFERRED,
        JobStatus.ABANDONED,
        JobStatus.COMPLETED,
        JobStatus.ABANDONED,
    ]
    assert table.job("together-broke-after-cancel")["error"] == "disconnected"
    assert table.job("together-done")["inserted_count"] == 3
    assert table.owner("together-broke") == {"health": "healthy", "consecutive_failures": 1, "last_error": "HTTP 500"}
    assert table.owner("together-throttled") is None  # a throttle does not count against its owner


def test_an_end_whose_lease_was_lost_is_not_written_and_the_others_are(table):
    """Each end is fenced on its own worker: one whose job another worker took over is left alone."""
    mine = table.running("mine")
    taken_over = table.running("taken-over", worker="another-worker")
    many = table.store.finish_many(
        [
            ("w-mine", Finish(mine, JobStatus.COMPLETED, 1)),
            ("w-taken-over", Finish(taken_over, JobStatus.COMPLETED, 1)),
        ],
        queue="shops",
        now=NOW,
    )
    assert [w.status if w else None for w in many.written] == [JobStatus.COMPLETED, None]
    assert (table.job("mine")["status"], table.job("taken-over")["status"]) == ("completed", "running")
    assert table.job("taken-over")["leased_by"] == "another-worker"


def test_it_says_whether_a_lane_it_left_may_have_work_due(table):
    """A take could find work only in a lane with a due job: its own job waiting again, or another due one."""

    def finish(lane: str, status: JobStatus = JobStatus.COMPLETED, delay: timedelta = timedelta(0)) -> bool:
        job = table.running(lane)
        return table.store.finish_many(
            [(f"w-{lane}", Finish(job, status, 1, delay=delay))], queue="shops", now=NOW
        ).lane_has_work

    assert not finish("alone")
    add_job(table.admin, table.schema, NOW, "busy", days_ago=2)
    assert finish("busy")
    add_job(table.admin, table.schema, NOW, "later", days_ago=2, due_in=timedelta(hours=1))
    assert not finish("later")  # its next job is not due yet
    assert finish("retried", JobStatus.FAILED)  # due again at once


def test_an_initial_job_that_completes_its_owner_s_first_load_wakes_the_watchers_once(table, database_url):
    """Two owners' last initial jobs completing in one statement: one notification, sent as it commits."""
    first = table.running("first")
    second = table.running("second")
    with psycopg.connect(database_url, autocommit=True) as listening:
        listening.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(table.schema))))
        table.store.finish_many(
            [("w-first", Finish(first, JobStatus.COMPLETED, 1)), ("w-second", Finish(second, JobStatus.COMPLETED, 1))],
            queue="shops",
            now=NOW,
        )
        heard = [note.payload for note in listening.notifies(timeout=2)]
    assert heard == ["shops"]


def test_two_statements_writing_the_same_owners_wait_for_each_other_and_never_deadlock(
    table, database_url, admin, caplog
):
    """Two slots' batches ending jobs of the owners x and y, given in opposite orders, while a third transaction
    holds y's row: each locks the owners' rows in one order (the owners' names), so the second waits behind the
    first instead of each holding the row the other waits for (a deadlock, which the server breaks after a second
    and the session sends again: slow, and logged)."""
    for owner in ("x", "y"):
        execute(admin, table.schema, "INSERT INTO {owners} (queue, owner) VALUES ('shops', %s)", [owner])
    ends = {}
    # Each batch's jobs in its order whichever way it is read: as given, by id, by lane.
    for lane in ("a1-y", "a2-x", "b1-x", "b2-y"):
        add_job(admin, table.schema, NOW, lane, days_ago=1, status="running", running_by=f"w-{lane}", owner=lane[-1])
        failed = Finish(table.job(lane)["id"], JobStatus.FAILED, 1, "HTTP 500", timedelta(minutes=1), True)
        ends[lane] = (f"w-{lane}", failed)
    first, second = Session(table.database), Session(table.database)
    try:
        with psycopg.connect(database_url) as holding:
            holding.execute(
                sql.SQL("SELECT 1 FROM {}.owners WHERE owner = 'y' FOR UPDATE").format(sql.Identifier(table.schema))
            )
            a = Background(lambda: Store(first).finish_many([ends["a1-y"], ends["a2-x"]], queue="shops", now=NOW))
            waiting_for_locks(admin, table.schema, 1)
            b = Background(lambda: Store(second).finish_many([ends["b1-x"], ends["b2-y"]], queue="shops", now=NOW))
            waiting_for_locks(admin, table.schema, 2)
        # the holding transaction ends here
        assert [w.status for w in a.result(10).written + b.result(10).written] == [JobStatus.FAILED] * 4
    finally:
        first.close()
        second.close()
    assert table.owner("x")["consecutive_failures"] == table.owner("y")["consecutive_failures"] == 2
    assert not [record.getMessage() for record in caplog.records if "deadlock" in record.getMessage()]


def waiting_for_locks(admin: psycopg.Connection, schema: str, statements: int) -> None:
    """Wait until ``statements`` statements on ``schema``'s tables wait for a lock."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        [row] = admin.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position(%s in query) > 0",
            [schema],
        ).fetchall()
        if row["n"] >= statements:
            return
        time.sleep(0.02)
    raise AssertionError(f"{statements} statements on {schema} never waited for a lock together")
