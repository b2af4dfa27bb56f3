"""The lease keeper of a worker process: one thread renews every running job's lease, in one statement for all
the jobs due, each job's lease as today's per job (a third of a lease after its last renewal; lost when taken
over, or when no renewal succeeded for 90 % of the lease)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

import psycopg
import pytest

from synclane_provider.core import Operations, Page, WorkerPool, WorkerSlot
from synclane_provider.core.clock import database_clock
from synclane_provider.core.db.database import Database
from synclane_provider.core.db.store import Store
from synclane_provider.core.records import Job
from synclane_provider.core.run.lease import TOGETHER, Leases, WatchedLease
from synclane_provider.core.run.runner import Outcome
from tests.support.fault_tools import application_name, database, wait_for, waiting_on_a_lock
from tests.support.helpers import connections_open, declare, execute, owners, products, rows
from tests.support.proxy import Proxy

LEASE = timedelta(seconds=1.2)
INTERVAL = LEASE.total_seconds() / 3


@pytest.fixture
def proxy(database_url):
    proxy = Proxy(database_url)
    yield proxy
    proxy.close()


@pytest.fixture
def running_jobs(schema, database_url) -> Iterator[Callable[..., list[Job]]]:
    """``count`` running jobs, each leased by a worker of its own (as a slot running many jobs would lease them)."""
    made: list[Database] = []

    def make(count: int, *, lease: timedelta = LEASE) -> list[Job]:
        declaration = declare(schema, products(), owner_source=owners(*(f"owner-{n}" for n in range(count))))
        made.append(declaration.database(database_url))
        with Operations(declaration, made[-1]) as ops, made[-1].session() as session:
            ops.plan("shops")
            store = Store(session)
            return [
                store.finish_and_take(
                    queue="shops", worker=f"worker-{n}", lease=lease, finish=None, take=True, now=None
                ).taken.job
                for n in range(count)
            ]

    yield make
    for made_database in made:
        made_database.close()


@contextmanager
def keeper(database_url: str, schema: str, **kwargs) -> Iterator[tuple[Leases, Database]]:
    """A process's keeper on a connection of its own, as a pool makes one."""
    with Database(database_url, schema=schema, **kwargs) as keeper_database:
        leases = Leases.on_own_connection(keeper_database, clock=database_clock, give_up_after=LEASE / 3)
        try:
            yield leases, keeper_database
        finally:
            leases.close()


@contextmanager
def watching(leases: Leases, jobs: list[Job], *, lease: timedelta = LEASE) -> Iterator[list[WatchedLease]]:
    with ExitStack() as stack:
        yield [stack.enter_context(leases.watch(job.id, worker=job.leased_by, lease=lease)) for job in jobs]


def heartbeats(admin: psycopg.Connection, schema: str) -> dict[int, object]:
    return {row["id"]: row["heartbeat_at"] for row in rows(admin, schema)}


def renewals(traffic_from: Database) -> int:
    return traffic_from.traffic.statements["renew_leases"]


def test_the_jobs_a_keeper_watches_are_renewed_together_by_one_statement_per_interval(
    schema, database_url, admin, running_jobs
):
    jobs = running_jobs(20)
    with keeper(database_url, schema) as (leases, keeper_database), watching(leases, jobs) as watched:
        started = time.monotonic()
        time.sleep(5 * INTERVAL)
        sent, elapsed = renewals(keeper_database), time.monotonic() - started
        assert not any(lease.lost for lease in watched)
    assert 3 <= sent <= elapsed / INTERVAL + 1  # one statement an interval for the twenty of them, not twenty
    assert len(set(heartbeats(admin, schema).values())) == 1  # the last renewal renewed every job at once
    assert {row["lease_expires_at"] > row["started_at"] + LEASE for row in rows(admin, schema)} == {True}


def test_jobs_watched_out_of_step_cost_a_few_statements_an_interval_however_many_they_are(
    schema, database_url, admin, running_jobs
):
    """Forty jobs whose renewals fall due all over an interval: a renewal takes along the ones due within a quarter
    of an interval of it, so at most about five statements go per interval, not forty."""
    jobs = running_jobs(40)
    with keeper(database_url, schema) as (leases, keeper_database), ExitStack() as stack:
        watched = []
        for job in jobs:
            watched.append(stack.enter_context(leases.watch(job.id, worker=job.leased_by, lease=LEASE)))
            time.sleep(INTERVAL / len(jobs))
        before, started = renewals(keeper_database), time.monotonic()
        time.sleep(5 * INTERVAL)
        sent, elapsed = renewals(keeper_database) - before, time.monotonic() - started
        assert not any(lease.lost for lease in watched)
    assert sent <= (1 / TOGETHER + 1) * (elapsed / INTERVAL + 1), sent  # one each would be 40 an interval
    assert len(set(heartbeats(admin, schema).values())) <= 6


def test_a_job_taken_over_turns_lost_within_an_interval_while_the_others_stay_renewed(
    schema, database_url, admin, running_jobs, caplog
):
    caplog.set_level(logging.WARNING)
    jobs = running_jobs(5)
    taken = jobs[2]
    with keeper(database_url, schema) as (leases, keeper_database), watching(leases, jobs) as watched:
        execute(admin, schema, "UPDATE {jobs} SET leased_by = 'another-worker' WHERE id = %s", [taken.id])
        changed = time.monotonic()
        held = heartbeats(admin, schema)[taken.id]
        wait_for(lambda: watched[2].lost, "the keeper to find the job taken over", timeout=INTERVAL + 1)
        assert time.monotonic() - changed < INTERVAL + 0.5
        assert not any(lease.lost for n, lease in enumerate(watched) if n != 2)
        before = heartbeats(admin, schema)
        time.sleep(3 * INTERVAL)  # the others are renewed on; the lost one is not tried again
        after = heartbeats(admin, schema)
        assert not any(lease.lost for n, lease in enumerate(watched) if n != 2)
    assert {job.id for job in jobs if after[job.id] != before[job.id]} == {job.id for job in jobs} - {taken.id}
    assert after[taken.id] == held  # the renewal that found it lost wrote nothing to another worker's job
    told = [r.getMessage() for r in caplog.records if "this worker stops writing to it" in r.getMessage()]
    assert told == [
        f"job {taken.id}: the job was taken over by worker another-worker; this worker stops writing to it"
    ]  # once, for that job alone


def test_a_database_away_for_longer_than_90_percent_of_the_lease_turns_every_lease_lost(
    schema, database_url, running_jobs, proxy, caplog
):
    caplog.set_level(logging.WARNING)
    jobs = running_jobs(3)
    with database(database_url, schema, application_name("leases"), conninfo=proxy.conninfo()) as through_proxy:
        leases = Leases.on_own_connection(through_proxy, clock=database_clock, give_up_after=LEASE / 3)
        try:
            with watching(leases, jobs) as watched:
                wait_for(lambda: renewals(through_proxy) >= 1, "a first renewal")
                assert not any(lease.lost for lease in watched)
                proxy.black_out()
                away = time.monotonic()
                wait_for(
                    lambda: all(lease.lost for lease in watched),
                    "the leases to be lost",
                    timeout=LEASE.total_seconds() + 1,
                )
                assert time.monotonic() - away < 0.9 * LEASE.total_seconds() + 0.3
                proxy.restore()
                wait_for(lambda: not any(lease.lost for lease in watched), "a renewal once the database is back")
        finally:
            leases.close()
    assert any("could not renew the leases of 3 running job(s)" in r.getMessage() for r in caplog.records)
    assert not any("stops writing" in r.getMessage() for r in caplog.records)  # nobody took them over


def test_a_job_whose_watch_ended_is_not_renewed(schema, database_url, admin, running_jobs):
    ended, kept = running_jobs(2)
    with keeper(database_url, schema) as (leases, _):
        with leases.watch(kept.id, worker=kept.leased_by, lease=LEASE):
            with leases.watch(ended.id, worker=ended.leased_by, lease=LEASE):
                pass
            before = heartbeats(admin, schema)
            time.sleep(3 * INTERVAL)
            after = heartbeats(admin, schema)
    assert after[ended.id] == before[ended.id] == ended.heartbeat_at
    assert after[kept.id] != before[kept.id]


def test_a_keeper_with_nothing_to_watch_ends_its_thread_and_lets_its_connection_go(
    schema, database_url, admin, running_jobs
):
    [job] = running_jobs(1)
    name = application_name("idle-keeper")
    with keeper(database_url, schema, application_name=name) as (leases, keeper_database):
        with leases.watch(job.id, worker=job.leased_by, lease=LEASE):
            wait_for(lambda: renewals(keeper_database) >= 1, "a renewal")
            assert leases.renewing and connections_open(admin, application=name)
        wait_for(lambda: not leases.renewing, "the thread to end", timeout=2 * INTERVAL + 1)
        assert connections_open(admin, application=name) == []
        with leases.watch(job.id, worker=job.leased_by, lease=LEASE) as watched:  # the next watch starts another
            wait_for(lambda: renewals(keeper_database) >= 2, "a renewal by the new thread")
            assert leases.renewing and not watched.lost


def test_a_renewal_that_comes_back_after_its_watch_ended_is_ignored(schema, database_url, admin, running_jobs, caplog):
    """The job ended while its renewal waited on the row (an operator had it locked, and handed it back): what the
    renewal found says nothing about the worker's next job, so nothing is lost and nothing is logged."""
    caplog.set_level(logging.WARNING)
    [job] = running_jobs(1)
    name = application_name("keeper")
    with (
        keeper(database_url, schema, application_name=name) as (leases, _),
        psycopg.connect(database_url, autocommit=False) as operator,
    ):
        execute(operator, schema, "UPDATE {jobs} SET leased_by = NULL, status = 'pending' WHERE id = %s", [job.id])
        watched = leases.watch(job.id, worker=job.leased_by, lease=LEASE)
        with watched:
            wait_for(lambda: waiting_on_a_lock(admin, name), "the renewal to wait on the row")
        operator.commit()
        leases.close()  # waits for the renewal in flight to come back and be read
    assert not watched.taken_over
    assert "stops writing" not in caplog.text


def test_a_pool_s_slots_share_one_keeper_on_a_connection_of_its_own(schema, database_url, admin):
    """Three slots each in a page longer than a lease: the pool's one keeper renews the three jobs (those due
    within a little of each other in one statement), on a connection that is neither slot's."""
    in_pages, release = threading.Barrier(4), threading.Event()

    def slow_page(job: Job) -> Page:
        in_pages.wait(10)
        release.wait(10)
        return Page(None, 1)

    declaration = declare(schema, products(slow_page), owner_source=owners("acme", "globex", "initech"), lease=LEASE)
    with declaration.database(database_url) as pool_database:
        with Operations(declaration, pool_database) as ops:
            ops.plan("shops")
        pool = WorkerPool(declaration, pool_database, "shops", slots=3)
        runner = threading.Thread(target=pool.drain)
        runner.start()
        try:
            in_pages.wait(10)
            assert pool.leases.watched == 3  # every slot's job, in the pool's one keeper
            before, connections = heartbeats(admin, schema), pool_database.traffic.connections
            time.sleep(2 * INTERVAL + 0.2)
            after = heartbeats(admin, schema)
            assert pool_database.traffic.connections == connections + 1  # the keeper's, opened by its first renewal
        finally:
            release.set()
            runner.join()
    assert [job for job, heartbeat in after.items() if heartbeat == before[job]] == []  # each renewed meanwhile
    assert {row["status"] for row in rows(admin, schema)} == {"completed"}


def test_a_slot_keeps_its_own_keeper_on_its_connection_and_closes_it(schema, database_url):
    declaration = declare(schema, products(lambda job: Page(None, 1)), lease=LEASE)
    with declaration.database(database_url) as slot_database:
        with Operations(declaration, slot_database) as ops:
            ops.plan("shops")
        with WorkerSlot(declaration, slot_database, "shops") as slot:
            job = slot.take()
            connections = slot_database.traffic.connections
            with slot.lease.watch(job.id) as lease:
                wait_for(lambda: renewals(slot_database) >= 1, "a renewal")
                assert not lease.lost
                assert slot.leases.renewing
            assert slot_database.traffic.connections == connections  # on the slot's own connection
        assert not slot.leases.renewing


def test_a_slot_s_job_whose_lease_is_taken_over_mid_page_ends_lease_lost(schema, database_url, admin):
    """The attempt reads the keeper's ``lost`` as before: a slow page whose job another worker took leaves it."""
    hang = threading.Event()

    def page(job: Job) -> Page:
        execute(admin, schema, "UPDATE {jobs} SET leased_by = 'another-worker' WHERE id = %s", [job.id])
        hang.wait(10)
        return Page(None, 1)

    declaration = declare(schema, products(page), lease=LEASE)
    with declaration.database(database_url) as slot_database:
        with Operations(declaration, slot_database) as ops:
            ops.plan("shops")
        with WorkerSlot(declaration, slot_database, "shops") as slot:
            try:
                result = slot.run_one(then_continue=False)
            finally:
                hang.set()
    assert result.outcome is Outcome.LEASE_LOST


def test_a_job_s_watch_wakes_the_keeper_only_when_it_is_due_before_the_keeper_wakes_anyway(
    schema, database_url, running_jobs
):
    """A slot starts a job hundreds of times a second; a watch whose renewal falls due after the keeper's own
    wake-up leaves the sleeping thread alone (it finds the watch when it wakes), so a job's start costs it nothing."""
    first, *others = running_jobs(40, lease=timedelta(minutes=5))
    with keeper(database_url, schema) as (leases, _):
        with leases.watch(first.id, worker=first.leased_by, lease=timedelta(minutes=5)):
            wait_for(lambda: leases._wakes_at > 0, "the keeper to sleep until the first renewal")
            notified = []
            notify = leases._changed.notify
            leases._changed.notify = lambda n=1: (notified.append(n), notify(n))  # type: ignore[method-assign]
            with ExitStack() as watching:
                for job in others:
                    watching.enter_context(leases.watch(job.id, worker=job.leased_by, lease=timedelta(minutes=5)))
                assert notified == []
                sooner = leases.watch(first.id, worker=first.leased_by, lease=timedelta(seconds=3))
                assert notified == [1]  # due sooner than the keeper meant to wake: woken
                leases.unwatch(sooner)
