"""The engine's own cost per job, counted rather than timed, so that a regression shows on any machine.

A busy pool of slots running one-page jobs is watched over a stretch of steady work (after every slot has
connected and taken its first job): the statements its sessions sent (``Database.traffic``), the connections
they opened, the results whose column names they read, the times an idle slot woke and the threads started,
each per job finished in that stretch.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import Job, Operations, Page, WorkerPool, WorkerSlot
from synclane_provider.core.db.database import Session, Traffic
from synclane_provider.core.db.wakeups import channel
from tests.support.helpers import declare, paged, products

WARM_UP = 100
"""Jobs finished before the stretch is watched: every slot has connected and started its threads."""


class ThreadStarts:
    """Counts every thread started in this process while installed."""

    def __init__(self) -> None:
        self.count = 0
        self._start = threading.Thread.start

    def __enter__(self) -> "ThreadStarts":
        original, counter = self._start, self

        def start(thread: threading.Thread) -> None:
            counter.count += 1
            original(thread)

        threading.Thread.start = start  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        threading.Thread.start = self._start  # type: ignore[method-assign]


class RowWrites:
    """Counts the rows written (inserted or updated) to the engine's tables while installed: a trigger on each
    table draws a number from a sequence of its own, so the count costs no lock and is read from any session."""

    TABLES = ("jobs", "owners")

    def __init__(self, admin: psycopg.Connection, schema: str) -> None:
        self.admin, self.schema = admin, schema

    def _names(self, table: str) -> dict[str, sql.Composable]:
        return {
            "table": sql.Identifier(self.schema, table),
            "sequence": sql.Identifier(self.schema, f"rows_written_to_{table}"),
            "counter": sql.Identifier(self.schema, f"count_a_row_written_to_{table}"),
            "trigger": sql.Identifier(f"count_rows_written_to_{table}"),
            "sequence_name": sql.Literal(f'"{self.schema}".rows_written_to_{table}'),
        }

    def __enter__(self) -> "RowWrites":
        for table in self.TABLES:
            for statement in (
                "CREATE SEQUENCE {sequence}",
                "CREATE FUNCTION {counter}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN PERFORM nextval({sequence_name}); RETURN NULL; END $$",
                "CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {counter}()",
            ):
                self.admin.execute(sql.SQL(statement).format(**self._names(table)))
        return self

    def snapshot(self) -> dict[str, int]:
        counts = {}
        for table in self.TABLES:
            query = sql.SQL("SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM {sequence}")
            counts[table] = self.admin.execute(query.format(**self._names(table))).fetchone()["n"]
        return counts

    def __exit__(self, *exc: object) -> None:
        for table in self.TABLES:
            for statement in (
                "DROP TRIGGER {trigger} ON {table}",
                "DROP FUNCTION {counter}()",
                "DROP SEQUENCE {sequence}",
            ):
                self.admin.execute(sql.SQL(statement).format(**self._names(table)))


@dataclass
class Stretch:
    """What a pool did over a stretch of steady work."""

    jobs: int
    seconds: float
    traffic: Traffic
    idle_waits: int
    threads: int
    rows_written: dict[str, int]

    def per_job(self, count: float) -> float:
        return count / self.jobs

    def other_statements(self, *expected: str) -> dict[str, int]:
        """Statements sent in the stretch other than the ``expected`` ones."""
        return {name: n for name, n in self.traffic.statements.items() if name not in expected and n}


@pytest.fixture
def due_jobs(schema, admin, database_url) -> Iterator[Callable[[int, int], None]]:
    """Fills the queue with due one-page jobs, spread round-robin over lanes (and as many owners, unless told)."""

    def fill(jobs: int, lanes: int, owners: int | None = None, mode: str = "recurring") -> None:
        declaration = declare(schema, products())
        with Operations(declaration, declaration.database(database_url)) as ops:
            ops.activity("shops")  # the table exists
        admin.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (queue, owner, lane, type, mode, dedup_key, next_run_at) "
                "SELECT 'shops', 'owner-' || (i %% %s), 'lane-' || (i %% %s), 'products', %s, "
                "       'due:' || i, now() - interval '1 minute' FROM generate_series(1, %s) AS i"
            ).format(sql.Identifier(schema)),
            [owners or lanes, lanes, mode, jobs],
        )
        admin.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(schema)))

    yield fill


def watch_a_busy_pool(
    schema: str,
    database_url: str,
    *,
    slots: int,
    jobs: int,
    poll: timedelta = timedelta(seconds=5),
    rows: RowWrites | None = None,
    jobs_per_slot: int = 1,
) -> Stretch:
    """Run a pool of ``slots`` of ``jobs_per_slot`` jobs each on the queue and watch it while it finishes ``jobs``
    jobs after its warm-up."""
    finished = itertools.count(1)
    done = [0]

    def one_page(job: Job) -> Page:
        done[0] = next(finished)
        return Page(None, 1)

    declaration = declare(schema, products(one_page))
    database = declaration.database(database_url)
    pool = WorkerPool(declaration, database, "shops", slots=slots, jobs_per_slot=jobs_per_slot, poll_interval=poll)
    runner = threading.Thread(target=pool.run, name="pool")
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while done[0] < WARM_UP and time.monotonic() < deadline:
            time.sleep(0.01)
        with ThreadStarts() as threads:
            before, waits, first, started = database.traffic.snapshot(), pool.idle_waits, done[0], time.monotonic()
            written = rows.snapshot() if rows else {}
            while done[0] < first + jobs and time.monotonic() < deadline:
                time.sleep(0.005)
            stretch = Stretch(
                jobs=done[0] - first,
                seconds=time.monotonic() - started,
                traffic=database.traffic - before,
                idle_waits=pool.idle_waits - waits,
                threads=threads.count,
                rows_written={
                    table: count - written[table] for table, count in (rows.snapshot() if rows else {}).items()
                },
            )
    finally:
        pool.shutdown()
        runner.join()
        database.close()
    assert stretch.jobs >= jobs, "the pool did not get through its jobs within a minute"
    return stretch


@pytest.mark.parametrize(("slots", "jobs_per_slot"), [(4, 1), (1, 16)], ids=["4 slots of one job", "a slot of 16"])
def test_a_one_page_job_costs_one_statement_at_most_and_nothing_else(
    schema, database_url, due_jobs, slots, jobs_per_slot
):
    """Many lanes, few slots: every slot is always busy, and each job is one statement, sent on a connection
    opened once (its result's column names read once), by a slot that never waits, on threads started once. A
    slot of many jobs costs no more per job: its seats' ends are written together (finish_many) and its idle seats
    take together (take_many), through connections opened once."""
    due_jobs(jobs=3000, lanes=200)
    stretch = watch_a_busy_pool(schema, database_url, slots=slots, jobs=1000, jobs_per_slot=jobs_per_slot)

    sent = ["finish_and_take"] if jobs_per_slot == 1 else ["finish_many", "take_many"]
    assert stretch.per_job(sum(stretch.traffic.statements[name] for name in sent)) <= 1.01, stretch.traffic
    assert stretch.other_statements(*sent) == {}
    assert stretch.traffic.connections == 0
    assert stretch.traffic.described == 0
    assert stretch.per_job(stretch.idle_waits) <= 0.01
    # A slot of many jobs starts a page thread when more pages are in flight at once than ever before (at most one
    # per seat in its life): none per job.
    assert stretch.threads <= (0 if jobs_per_slot == 1 else jobs_per_slot), stretch


def test_a_slot_s_pages_run_on_the_thread_that_sends_its_statements_not_the_caller_s(
    schema, database_url, due_jobs, monkeypatch
):
    """Handing each page to another thread and back costs two thread switches a page, more than a one-page job's
    statement on a busy machine. A slot's pages run on its work thread, between the statements that save their
    cursors and finish their jobs; the thread that asked for the work only watches it (so that a page that
    hangs can still be left behind)."""
    due_jobs(jobs=20, lanes=20)
    handler_threads, statement_threads = set(), set()
    ten_pages = paged(10, 1)

    def page(job: Job) -> Page:
        handler_threads.add(threading.get_ident())
        return ten_pages(job)

    run = Session.run

    def sent(session: Session, name: str, **kwargs: object) -> list[dict]:
        if name in ("save_page", "finish_and_take"):
            statement_threads.add(threading.get_ident())
        return run(session, name, **kwargs)

    declaration = declare(schema, products(page))
    monkeypatch.setattr(Session, "run", sent)
    with declaration.database(database_url) as database, WorkerSlot(declaration, database, "shops") as slot:
        summary = slot.drain()

    assert (summary.outcomes, summary.pages) == ({"completed": 20}, 200)
    assert len(handler_threads) == 1 and handler_threads == statement_threads
    assert threading.get_ident() not in handler_threads
    assert slot.thread.started == 1


def test_a_job_writes_its_row_twice_and_a_healthy_owner_s_row_once_a_minute(schema, admin, database_url, due_jobs):
    """Taking a job writes its row, finishing it writes it again, and nothing else is written: the finish of a
    healthy owner's job leaves the owner's row alone when it was stamped clean within the last minute, so an
    owner with many jobs is not one row every slot's finish waits on."""
    due_jobs(jobs=3000, lanes=20)  # 20 owners, one per lane
    with RowWrites(admin, schema) as rows:
        stretch = watch_a_busy_pool(schema, database_url, slots=4, jobs=1000, rows=rows)

    assert stretch.per_job(stretch.rows_written["jobs"]) <= 2.01, stretch
    assert stretch.rows_written["owners"] <= 20, stretch  # each owner's first clean run at most


def test_an_owner_s_first_load_is_announced_once_not_once_a_slice(schema, database_url, due_jobs):
    """A completed initial job notifies the first loads' watchers only when no other initial job of its owner
    and type is left waiting: a NOTIFY serializes the commits of every session that sends one, so one per
    history slice would put a queue's workers in single file. Each owner's last slice still announces it."""
    due_jobs(jobs=600, lanes=600, owners=12, mode="initial")  # 50 slices an owner, every lane free
    declaration = declare(schema, products(lambda job: Page(None, 1)))
    database = declaration.database(database_url)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema))))
        with WorkerSlot(declaration, database, "shops") as slot:
            assert slot.drain().outcomes["completed"] == 600
        announced = [note.payload for note in listener.notifies(timeout=1)]
    database.close()

    assert announced == ["shops"] * 12


def test_slots_with_no_free_lane_sleep_on_their_connections_instead_of_polling(schema, database_url, due_jobs):
    """Twelve slots on three lanes: nine have nothing they may take, though jobs are due in every lane. They
    wake once per poll interval at most (or when a lane is left), send a take and one look each time, and
    keep their connections, since work is due."""
    poll = timedelta(milliseconds=200)
    due_jobs(jobs=4000, lanes=3)
    stretch = watch_a_busy_pool(schema, database_url, slots=12, jobs=600, poll=poll)

    idle_slots = 12 - 3
    polls = idle_slots * (stretch.seconds / poll.total_seconds() + 1)
    lanes_left = 0.05 * stretch.jobs  # a slot whose lane ran dry moves on, and wakes one idle slot
    assert stretch.idle_waits <= polls + lanes_left, stretch
    looks = stretch.traffic.statements["worker_wakeup"]
    assert looks <= stretch.idle_waits + idle_slots, stretch  # one look per wait (a wait is skipped after a wake)
    takes = stretch.traffic.statements["finish_and_take"]
    assert takes <= stretch.jobs + stretch.idle_waits + idle_slots + 0.05 * stretch.jobs, stretch
    assert stretch.per_job(stretch.traffic.connections) * 1000 == 0
    assert stretch.threads == 0


def test_a_statement_s_column_names_are_read_once_per_connection(schema, database_url):
    """Rows come back as dicts keyed by the statement's columns, the names read from the first result only,
    and read again on a new connection (whose prepared statement may return other columns)."""
    declaration = declare(schema, products())
    with declaration.database(database_url) as database, database.session() as session:
        before = database.traffic.snapshot()
        first, second = session.run("connection_room"), session.run("connection_room")
        assert sorted(first[0]) == sorted(second[0]) == ["role_room", "server_room"]
        assert (database.traffic - before).described == 1
        session.close()
        assert sorted(session.run("connection_room")[0]) == ["role_room", "server_room"]
        assert (database.traffic - before).described == 2


def test_a_lease_keeper_renews_nothing_once_its_job_has_ended(schema, database_url, due_jobs, caplog):
    """The keeper renews a lease only while the job runs: after the job, an idle slot's keeper sends nothing
    (a renewal of the ended job would be refused and read as a lost lease)."""
    due_jobs(jobs=1, lanes=1)
    declaration = declare(schema, products(lambda job: Page(None, 1)), lease=timedelta(milliseconds=300))
    database = declaration.database(database_url)
    with WorkerSlot(declaration, database, "shops") as slot:
        assert slot.run_one(then_continue=False) is not None
        before = database.traffic.snapshot()
        time.sleep(0.5)  # five of the keeper's renewal intervals (a third of the lease)
        assert (database.traffic - before).statements["renew_leases"] == 0
    assert "stops writing" not in caplog.text
    database.close()
