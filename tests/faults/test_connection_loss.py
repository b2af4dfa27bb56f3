"""A worker whose database connections die: killed by the server, cut after the server answered, or the
database away for a while. It reconnects with backoff and continues the job from its cursor; no page runs
twice at once, no job is lost, and the outcome it reports is the one written on the row."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import (
    DatabaseUnavailableError,
    Job,
    Operations,
    Owner,
    Page,
    Session,
    WorkerPool,
    WorkerSlot,
)
from synclane_provider.core.run.runner import Outcome
from tests.support.fault_tools import (
    PATIENCE,
    PageLog,
    application_name,
    database,
    marker,
    terminate,
    wait_for,
    waiting_on_a_lock,
)
from tests.support.helpers import declare, owners, paged, products, rows
from tests.support.proxy import Proxy

TOTAL = 300
PAGE = 50
ALL_PAGES = [None, "50", "100", "150", "200", "250"]


@pytest.fixture
def proxy(database_url):
    proxy = Proxy(database_url)
    yield proxy
    proxy.close()


@pytest.fixture
def worker(schema, database_url):
    """Declare one queue around ``handler``, plan it, and give worker slots whose connections carry a name."""
    made = []

    def make(handler, *, through=None, owner_source=None, **settings):
        name = application_name("worker")
        declaration = declare(schema, products(handler), owner_source=owner_source, **settings)
        with Operations(declaration, declaration.database(database_url)) as ops:
            ops.plan("shops")
        db = database(database_url, schema, name, conninfo=through.conninfo() if through else None)

        def slot(**kwargs):
            made.append(WorkerSlot(declaration, db, "shops", **kwargs))
            if through is not None:
                # Prepared statements cross the wire by name; the proxy recognises statements by their text.
                made[-1].session.prepare_threshold = None
            return made[-1]

        return slot, name, declaration, db

    yield make
    for slot in made:
        slot.close()


def lock_row(conn: psycopg.Connection, schema: str, job_id: int) -> None:
    """Lock one job row in ``conn``'s open transaction, as an operator's long ``SELECT … FOR UPDATE`` would."""
    conn.execute(sql.SQL("SELECT id FROM {}.jobs WHERE id = %s FOR UPDATE").format(sql.Identifier(schema)), [job_id])


def the_row(admin, schema):
    [row] = rows(admin, schema)
    return row


def assert_completed_once(admin, schema, log: PageLog, result) -> None:
    """The job completed in one attempt, every page ran exactly once, in order, and the count is exact."""
    row = the_row(admin, schema)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", TOTAL, 1)
    assert (row["leased_by"], row["lease_expires_at"]) == (None, None)
    assert log.cursors(row["id"]) == ALL_PAGES
    assert result.outcome is Outcome.COMPLETED


# --- killed by the server (pg_terminate_backend) ------------------------------------------------------------


def test_a_connection_killed_between_pages_is_reopened_and_the_job_continues_from_its_cursor(worker, admin, schema):
    pages = paged(TOTAL, PAGE)
    killed = []

    def handler(job: Job) -> Page:
        if job.cursor in ("100", "200"):
            killed.append(terminate(admin, name))  # the connection is idle: the page is the API's time
        return pages(job)

    log = PageLog(handler)
    slot, name, *_ = worker(log)
    one = slot()
    result = one.run_one()

    assert killed == [1, 1]
    assert one.session.reconnects >= 2
    assert_completed_once(admin, schema, log, result)


def test_a_connection_killed_during_a_slow_page_is_reopened_by_the_heartbeat_which_keeps_the_lease(
    worker, admin, schema, database_url
):
    pages = paged(TOTAL, PAGE)
    lease = timedelta(seconds=2)
    taken_by_rival = []

    def handler(job: Job) -> Page:
        if job.cursor == "150":
            terminate(admin, name)
            killed_at = admin.execute("SELECT clock_timestamp() AS t").fetchone()["t"]

            # The page is slow: it lasts until the heartbeat, on a new connection, has renewed the lease more
            # than a lease after the kill, while a rival keeps asking for the job.
            def renewed_beyond_a_lease():
                taken_by_rival.append(rival.take())
                return the_row(admin, schema)["heartbeat_at"] > killed_at + lease

            wait_for(renewed_beyond_a_lease, "the heartbeat to keep renewing the lease after its connection was killed")
        return pages(job)

    log = PageLog(handler)
    slot, name, declaration, _ = worker(log, lease=lease)
    rival = WorkerSlot(declaration, declaration.database(database_url), "shops")
    try:
        result = slot().run_one()
    finally:
        rival.close()

    assert taken_by_rival and set(taken_by_rival) == {None}  # the lease never lapsed
    assert_completed_once(admin, schema, log, result)


@pytest.mark.parametrize("blocked", ["save_page", "finish"])
def test_a_statement_killed_while_it_waits_is_run_again_on_a_new_connection(
    worker, admin, schema, database_url, blocked
):
    """An operator's open transaction holds the row; the worker's statement waits on it and is killed there."""
    pages = paged(TOTAL, PAGE)
    locker = psycopg.connect(database_url)  # not autocommit: its transaction stays open
    at = "100" if blocked == "save_page" else "250"

    def handler(job: Job) -> Page:
        if job.cursor == at:
            lock_row(locker, schema, job.id)
        return pages(job)

    log = PageLog(handler)
    slot, name, *_ = worker(log)
    one = slot()
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", one.run_one()))
    thread.start()
    try:
        wait_for(lambda: waiting_on_a_lock(admin, name), f"{blocked} to wait on the locked row")
        assert terminate(admin, name) == 1
    finally:
        locker.rollback()
        thread.join(PATIENCE)
        locker.close()

    assert not thread.is_alive()
    assert one.session.reconnects >= 1
    assert_completed_once(admin, schema, log, outcome["result"])


@pytest.mark.parametrize(("slots", "jobs_per_slot"), [(4, 1), (1, 4)], ids=["4 slots of one job", "a slot of 4"])
def test_killing_every_connection_of_a_pool_again_and_again_loses_nothing_and_never_overlaps_a_lane(
    schema, database_url, admin, slots, jobs_per_slot
):
    """Four workers, three lanes, and every few pages all of the pool's connections are killed, whatever they
    were doing at that moment (a take, a save, a heartbeat, a completion, or nothing)."""
    name = application_name("pool")
    counter = {"pages": 0}
    counter_lock, killer_lock = threading.Lock(), threading.Lock()
    kills = []
    killer = psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row)

    def handler(job: Job) -> Page:
        with counter_lock:
            counter["pages"] += 1
            kill = counter["pages"] % 7 == 0
        if kill:
            with killer_lock:
                kills.append(terminate(killer, name))
        return paged(6 * PAGE + job.id % 3 * PAGE, PAGE)(job)

    log = PageLog(handler)
    source = owners(*[Owner(f"owner-{i}", lane=f"lane-{i % 3}") for i in range(12)])
    declaration = declare(schema, products(log), owner_source=source)
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops")
    pool = WorkerPool(
        declaration, database(database_url, schema, name), "shops", slots=slots, jobs_per_slot=jobs_per_slot
    )
    try:
        summary = pool.drain()
    finally:
        pool.close()
        killer.close()

    done = rows(admin, schema)
    assert len(kills) >= 10 and sum(kills) > len(kills)  # often more than one connection at once
    assert [(r["status"], r["attempt_count"]) for r in done] == [("completed", 1)] * 12
    for row in done:
        total = 6 * PAGE + row["id"] % 3 * PAGE
        assert row["processed_count"] == total
        assert log.cursors(row["id"]) == [None] + [str(n) for n in range(PAGE, total, PAGE)]
    assert log.overlaps() == 0
    assert summary.as_dict()["completed"] == 12 and summary.jobs == 12


# --- the reply lost after the server answered ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("lost", "armed_at"),
    [
        ("finish_and_take", "start"),  # the take
        ("save_page", "100"),
        ("finish_and_take", "250"),  # the completion (with the take of the next job)
    ],
    ids=["take", "save", "completion"],
)
def test_a_statement_whose_reply_is_lost_after_it_ran_is_repeated_harmlessly(
    worker, admin, schema, proxy, lost, armed_at
):
    pages = paged(TOTAL, PAGE)
    armed = {}

    def handler(job: Job) -> Page:
        if job.cursor == armed_at:
            armed["event"] = proxy.lose_reply(marker(lost, schema))
        return pages(job)

    log = PageLog(handler)
    slot, *_ = worker(log, through=proxy)
    if armed_at == "start":
        armed["event"] = proxy.lose_reply(marker(lost, schema))
    one = slot()
    result = one.run_one()

    assert armed["event"].is_set()
    assert one.session.reconnects >= 1
    assert_completed_once(admin, schema, log, result)  # the completion too: it reports what the row says


def test_a_failure_whose_reply_is_lost_still_reports_the_failure_written(worker, admin, schema, proxy):
    pages = paged(TOTAL, PAGE)

    def handler(job: Job) -> Page:
        if job.cursor == "100":
            proxy.lose_reply(marker("finish_and_take", schema))
            raise ConnectionResetError("the shop hung up")
        return pages(job)

    slot, *_ = worker(handler, through=proxy)
    result = slot().run_one()

    assert proxy.reply_lost.is_set()
    assert (result.outcome, result.error) == (Outcome.FAILED, "ConnectionResetError: the shop hung up")
    row = the_row(admin, schema)
    assert (row["status"], row["cursor"], row["processed_count"], row["leased_by"]) == ("failed", "100", 100, None)


def test_a_failure_after_a_cancel_whose_reply_is_lost_still_reports_the_abandonment_written(
    worker, admin, schema, proxy, database_url
):
    """The page fails after a cancel (a disconnected account answers 401); the finish turns into the cancel's
    abandonment, and its reply is lost: the repeat finds the job gone, and the row says what was written."""
    pages = paged(TOTAL, PAGE)

    def handler(job: Job) -> Page:
        if job.cursor == "100":
            with Operations(declaration, declaration.database(database_url)) as ops:
                assert ops.cancel("shops", "acme", "account disconnected").stopping == 1
            proxy.lose_reply(marker("finish_and_take", schema))
            raise RuntimeError("401 Unauthorized")
        return pages(job)

    slot, _, declaration, _ = worker(handler, through=proxy)
    result = slot().run_one()

    assert proxy.reply_lost.is_set()
    assert (result.outcome, result.error) == (Outcome.ABANDONED, "Cancelled: account disconnected")
    row = the_row(admin, schema)
    assert (row["status"], row["error"], row["processed_count"], row["leased_by"]) == (
        "abandoned",
        "Cancelled: account disconnected",
        100,
        None,
    )


def test_a_release_whose_reply_is_lost_still_reports_the_job_handed_back(worker, admin, schema, proxy):
    stop = threading.Event()
    pages = paged(TOTAL, PAGE)

    def handler(job: Job) -> Page:
        if job.cursor == "100":
            stop.set()
        return pages(job)

    slot, *_ = worker(handler, through=proxy)
    reply_lost = proxy.lose_reply(marker("release", schema))
    result = slot(stop=stop).run_one()

    assert reply_lost.is_set()
    assert result.outcome is Outcome.RELEASED
    row = the_row(admin, schema)
    assert (row["status"], row["cursor"], row["processed_count"], row["attempt_count"]) == ("pending", "150", 150, 0)


def test_a_graceful_stop_on_a_killed_connection_still_hands_the_job_back(worker, admin, schema):
    stop = threading.Event()
    pages = paged(TOTAL, PAGE)

    def handler(job: Job) -> Page:
        if job.cursor == "50":
            stop.set()
            terminate(admin, name)
        return pages(job)

    slot, name, *_ = worker(handler)
    result = slot(stop=stop).run_one()

    assert result.outcome is Outcome.RELEASED
    row = the_row(admin, schema)
    assert (row["status"], row["cursor"], row["processed_count"], row["leased_by"]) == ("pending", "100", 100, None)


# --- the database away --------------------------------------------------------------------------------------


def test_while_the_database_is_away_a_session_backs_off_then_gives_up_naming_the_statement(schema, database_url, proxy):
    session = Session(
        database(database_url, schema, application_name("away"), conninfo=proxy.conninfo()),
        give_up_after=timedelta(seconds=2),
    )
    assert session.one("queue_activity", queue="shops", lane=None, now=None)["running"] is False
    proxy.black_out()
    with pytest.raises(DatabaseUnavailableError, match="'queue_activity'"):
        session.run("queue_activity", queue="shops", lane=None, now=None)

    assert 2 <= proxy.refused <= 12  # it kept trying, with doubling waits: a tight loop makes thousands
    proxy.restore()
    assert session.one("queue_activity", queue="shops", lane=None, now=None)["running"] is False
    session.close()


def test_a_stopping_session_does_not_wait_for_a_database_that_is_away(schema, database_url, proxy):
    stop = threading.Event()
    session = Session(
        database(database_url, schema, application_name("stopping"), conninfo=proxy.conninfo()),
        give_up_after=timedelta(seconds=30),
        stop=stop,
    )
    session.run("queue_activity", queue="shops", lane=None, now=None)
    proxy.black_out()
    stop.set()
    with pytest.raises(DatabaseUnavailableError):
        session.run("queue_activity", queue="shops", lane=None, now=None)
    assert proxy.refused <= 2  # one fresh connection is worth a try; then a stopping worker lets go
    session.close()


def test_a_worker_cut_off_longer_than_its_lease_stops_writing_and_the_job_is_taken_over(
    worker, admin, schema, database_url, proxy
):
    """The heartbeat cannot renew while the database is away; the lease lapses and another worker (still
    connected) takes the job over: it writes the lost attempt down as failed at its cursor, and the retry
    continues from there. The first worker, when its slow page returns, writes nothing; when the database
    is back its heartbeat learns that the job is gone."""
    pages = paged(TOTAL, PAGE)
    rescued = {}

    def handler(job: Job) -> Page:
        if job.cursor == "100" and job.attempt_count == 1:
            proxy.black_out()
            rescued["takeover"] = wait_for(rival.run_one, "the rival to take the job over once the lease lapsed")
            proxy.restore()
        return pages(job)

    log = PageLog(handler)
    slot, _, declaration, _ = worker(
        log, through=proxy, lease=timedelta(seconds=1), retry_delay=timedelta(milliseconds=50)
    )
    rival = WorkerSlot(declaration, declaration.database(database_url), "shops")
    cut_off = slot()
    try:
        result = cut_off.run_one()
        retried = wait_for(rival.run_one, "the retry to be due")
    finally:
        rival.close()

    assert result.outcome is Outcome.LEASE_LOST
    takeover = rescued["takeover"]
    assert (takeover.outcome, takeover.pages) == (Outcome.FAILED, 0)
    assert (
        takeover.error
        == f"WorkerLost: worker {cut_off.worker_id} stopped renewing its lease at cursor '100' (lost 1 time(s) in a row)"
    )
    assert retried.outcome is Outcome.COMPLETED
    row = the_row(admin, schema)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", TOTAL, 2)
    assert log.cursors(row["id"]) == [None, "50", "100", "100", "150", "200", "250"]
    assert proxy.refused >= 1
    cut_off.close()  # returns: the heartbeat is not stuck retrying a renewal for a job it lost
