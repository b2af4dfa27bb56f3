"""Pages landed in the jobs database commit with their cursor, fenced on the job's lease: exactly once.

Every write to the destination table is counted by a trigger, and content is not compared (a page landed twice
would be written twice), so a page landed more than once shows as a row written twice.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import Destination, Job, Operations, Page, WorkerSlot
from synclane_provider.core.run.multislot import MultiSlot
from synclane_provider.core.run.runner import Outcome
from tests.support.helpers import Background, declare, execute, owners, products, rows

TABLE = """
CREATE TABLE {schema}.records (owner text NOT NULL, id integer NOT NULL, page text, PRIMARY KEY (owner, id));
CREATE TABLE {schema}.record_writes (id integer NOT NULL);
CREATE OR REPLACE FUNCTION {schema}.count_record_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.record_writes VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER count_record_write AFTER INSERT OR UPDATE ON {schema}.records
    FOR EACH ROW EXECUTE FUNCTION {schema}.count_record_write();
"""


def landing_declaration(
    schema: str, total: int, size: int, before_save: Callable[[Job], None] = lambda job: None, **settings
):
    """One snapshot type whose handler lands ``size`` records a page in ``schema.records`` (the jobs database),
    then calls ``before_save`` (between the write and the cursor save)."""
    records = Destination(f"{schema}.records", key=("owner", "id"), owner="owner", compare=False)

    def handler(job: Job) -> Page:
        offset = int(job.cursor or 0)
        count = min(size, total - offset)
        records.land(job, [{"id": i, "page": job.cursor} for i in range(offset, offset + count)])
        before_save(job)
        following = offset + count
        return Page(str(following) if following < total else None, count)

    return declare(
        schema,
        products(handler),
        lease=timedelta(seconds=30),
        max_attempts=100_000,
        retry_delay=timedelta(milliseconds=1),
        retry_max_delay=timedelta(milliseconds=1),
        **settings,
    )


@pytest.fixture
def with_records(schema: str, admin: psycopg.Connection) -> str:
    admin.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    admin.execute(sql.SQL("DROP TABLE IF EXISTS {0}.records, {0}.record_writes").format(sql.Identifier(schema)))
    admin.execute(sql.SQL(TABLE).format(schema=sql.Identifier(schema)).as_string(admin).encode())
    return schema


def writes_per_record(admin: psycopg.Connection, schema: str) -> dict[int, int]:
    found = admin.execute(
        sql.SQL("SELECT id, count(*) AS n FROM {}.record_writes GROUP BY id").format(sql.Identifier(schema))
    )
    return {r["id"]: r["n"] for r in found}


def planned(declaration, database) -> None:
    with Operations(declaration, database) as ops:
        ops.plan("shops")


def test_each_page_commits_with_its_cursor_and_a_failed_page_lands_nothing(database_url, with_records, admin):
    schema = with_records

    def fail_at_20(job: Job) -> None:
        if job.cursor == "20" and job.attempt_count == 1:
            raise RuntimeError("the page broke after landing")

    declaration = landing_declaration(schema, total=50, size=10, before_save=fail_at_20)
    database = declaration.database(database_url)
    planned(declaration, database)
    slot = WorkerSlot(declaration, database, "shops")
    try:
        first = slot.run_one(then_continue=False)
        assert (first.outcome, first.pages) == (Outcome.FAILED, 2), first.describe()
        assert sorted(writes_per_record(admin, schema)) == list(range(20))  # the failed page's rows rolled back
        [job] = rows(admin, schema)
        assert (job["cursor"], job["processed_count"]) == ("20", 20)
        time.sleep(0.05)
        second = None
        while second is None:
            second = slot.run_one(then_continue=False)
        assert second.outcome is Outcome.COMPLETED
    finally:
        slot.close()
    assert writes_per_record(admin, schema) == {i: 1 for i in range(50)}
    [job] = rows(admin, schema)
    assert (job["status"], job["processed_count"]) == ("completed", 50)


def test_a_cursor_save_that_fails_in_the_page_transaction_lands_nothing_and_the_retry_lands_the_page(
    database_url, with_records, admin
):
    """The statement that saves the cursor fails (here a trigger on the jobs table refuses it in the first attempt): the page's
    rows, written in the same transaction, are undone with it, and the slot's next page starts a clean
    transaction -- the retry lands the page once, and nothing of the failed try commits with it."""
    schema = with_records
    admin.execute(
        sql.SQL(
            """
            CREATE FUNCTION {schema}.refuse_once() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.cursor = '20' AND NEW.cursor IS DISTINCT FROM OLD.cursor AND NEW.attempt_count = 1 THEN
                    RAISE EXCEPTION 'the cursor save is refused once';
                END IF;
                RETURN NEW;
            END $$;
            """
        )
        .format(schema=sql.Identifier(schema))
        .as_string(admin)
        .encode()
    )
    declaration = landing_declaration(schema, total=30, size=10)
    database = declaration.database(database_url)
    planned(declaration, database)
    execute(
        admin,
        schema,
        sql.SQL("CREATE TRIGGER refuse_once BEFORE UPDATE ON {{jobs}} FOR EACH ROW EXECUTE FUNCTION {}.refuse_once()")
        .format(sql.Identifier(schema))
        .as_string(admin),
    )
    slot = WorkerSlot(declaration, database, "shops")
    try:
        first = slot.run_one(then_continue=False)
        assert (first.outcome, first.pages) == (Outcome.FAILED, 2), first.describe()
        assert "the cursor save is refused once" in (first.error or "")
        assert sorted(writes_per_record(admin, schema)) == list(range(10))  # the second page undone with its save
        second = None
        while second is None:
            time.sleep(0.01)
            second = slot.run_one(then_continue=False)
        assert second.outcome is Outcome.COMPLETED, second.describe()
    finally:
        slot.close()
        execute(admin, schema, "DROP TRIGGER refuse_once ON {jobs}")  # the schema's jobs table outlives this test
    assert writes_per_record(admin, schema) == {i: 1 for i in range(30)}


def test_a_worker_whose_job_was_taken_over_commits_nothing_of_its_page(database_url, with_records, admin):
    schema = with_records
    landed, go_on = threading.Event(), threading.Event()

    def wait_at_10(job: Job) -> None:
        if job.cursor == "10":
            landed.set()
            assert go_on.wait(10)

    declaration = landing_declaration(schema, total=30, size=10, before_save=wait_at_10)
    database = declaration.database(database_url)
    planned(declaration, database)
    slot = WorkerSlot(declaration, database, "shops")
    outcome: list = []
    runner = threading.Thread(target=lambda: outcome.append(slot.run_one(then_continue=False)))
    runner.start()
    try:
        assert landed.wait(10)
        execute(admin, schema, "UPDATE {jobs} SET leased_by = 'another-worker' WHERE status = 'running'")
        go_on.set()
        runner.join(10)
    finally:
        go_on.set()
        slot.close()
    assert outcome[0].outcome is Outcome.LEASE_LOST
    assert writes_per_record(admin, schema) == {i: 1 for i in range(10)}  # the second page landed nothing
    [job] = rows(admin, schema)
    assert (job["cursor"], job["processed_count"], job["leased_by"]) == ("10", 10, "another-worker")


def test_a_page_whose_lease_was_lost_is_rolled_back_and_never_commits_with_the_slots_next_job(
    database_url, with_records, admin
):
    """The slot's page transaction outlives the job whose lease was lost: the next job's pages, on the same
    connection, commit only their own rows."""
    schema = with_records
    landed, go_on = threading.Event(), threading.Event()

    def wait_at_acmes_second_page(job: Job) -> None:
        if job.owner == "acme" and job.cursor == "10":
            landed.set()
            assert go_on.wait(10)

    declaration = landing_declaration(
        schema, total=30, size=10, before_save=wait_at_acmes_second_page, owner_source=owners("acme", "globex")
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops", owner="acme")
        slot = WorkerSlot(declaration, database, "shops")
        try:
            acme = Background(lambda: slot.run_one(then_continue=False), name="acme's job")
            assert landed.wait(10)
            execute(admin, schema, "UPDATE {jobs} SET leased_by = 'another-worker' WHERE status = 'running'")
            go_on.set()
            assert acme.result().outcome is Outcome.LEASE_LOST
            ops.plan("shops", owner="globex")
            assert slot.run_one(then_continue=False).outcome is Outcome.COMPLETED
        finally:
            go_on.set()
            slot.close()
    stored = admin.execute(sql.SQL("SELECT owner, id FROM {}.records").format(sql.Identifier(schema))).fetchall()
    assert sorted((r["owner"], r["id"]) for r in stored) == [("acme", i) for i in range(10)] + [
        ("globex", i) for i in range(30)
    ]


KILLS = int(os.environ.get("SYNCLANE_LANDING_KILLS", "200"))


def test_workers_killed_between_the_write_and_the_cursor_save_land_every_record_exactly_once(
    database_url, with_records, admin
):
    """Worker processes are SIGKILLed hundreds of times, most of them holding a page written but not yet saved,
    the others at a random instant (in a COPY, a commit, a take); each next worker takes the job over at once
    (the test lapses the lease). At the end every record was written exactly once."""
    schema = with_records
    # Enough pages that the job outlasts the kills however fast a page lands: a worker killed at a random
    # instant lands pages freely until then (a run at 540 pages a second finished 20,000 records in 91 kills).
    # The cursor is an offset, so the last worker drains what is left in larger pages.
    total, size, drain_size = 300_000, 10, 1_000
    rng = random.Random(24)
    database_url_for_children = database_url
    planning = landing_declaration(schema, total, size)
    planned(planning, planning.database(database_url))
    killed_holding_a_page = 0
    kills = 0
    while kills < KILLS:
        [job] = rows(admin, schema)
        if job["status"] == "completed":
            break
        hang_at_page = rng.randint(1, 3) if rng.random() < 0.75 else None
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker process
            os.close(read)
            pages = 0

            def hang(job: Job) -> None:
                nonlocal pages
                pages += 1
                if pages == hang_at_page:
                    os.write(write, b"landed\n")
                    time.sleep(600)

            try:
                declaration = landing_declaration(schema, total, size, before_save=hang)
                slot = WorkerSlot(declaration, declaration.database(database_url_for_children), "shops")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    result = slot.run_one(then_continue=False)
                    if result is not None and result.outcome is Outcome.COMPLETED:
                        break
                    time.sleep(0.002)
            finally:
                os._exit(0)
        os.close(write)
        try:
            if hang_at_page is not None:
                with os.fdopen(read, "rb", buffering=0) as announced:
                    said = announced.readline()
                killed_holding_a_page += said == b"landed\n"
            else:
                os.close(read)
                time.sleep(rng.uniform(0.0, 0.3))
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        kills += 1
        execute(
            admin, schema, "UPDATE {jobs} SET lease_expires_at = now() - interval '1 second' WHERE status = 'running'"
        )
    [job] = rows(admin, schema)
    print(f"kills={kills} killed_holding_a_page={killed_holding_a_page} cursor={job['cursor']} of {total}")
    assert kills >= min(KILLS, 100) and killed_holding_a_page >= kills // 2, (kills, killed_holding_a_page)

    declaration = landing_declaration(schema, total, drain_size)
    database = declaration.database(database_url)
    slot = WorkerSlot(declaration, database, "shops")
    try:
        deadline = time.monotonic() + 120
        while rows(admin, schema)[0]["status"] != "completed":
            assert time.monotonic() < deadline
            slot.run_one(then_continue=False)
            time.sleep(0.002)
    finally:
        slot.close()
    written = writes_per_record(admin, schema)
    assert sorted(written) == list(range(total))
    twice = {i: n for i, n in written.items() if n != 1}
    assert not twice, (
        f"{len(twice)} records written more than once after {kills} kills: {dict(list(twice.items())[:10])}"
    )
    [job] = rows(admin, schema)
    assert job["processed_count"] == total


def test_a_slot_of_many_jobs_commits_each_page_with_its_own_cursor(database_url, with_records, admin):
    """Four owners' jobs land their pages at once from one slot: each page commits with its own job's cursor, and
    the page that fails after landing leaves nothing of itself; every record is written once per owner."""
    schema = with_records
    shops = [f"acme-{i}" for i in range(4)]

    def fail_once(job: Job) -> None:
        if job.owner == "acme-1" and job.cursor == "20" and job.attempt_count == 1:
            raise RuntimeError("the page broke after landing")

    declaration = landing_declaration(schema, total=50, size=10, before_save=fail_once, owner_source=owners(*shops))
    database = declaration.database(database_url)
    planned(declaration, database)
    opened = count_connects(database)
    with MultiSlot(declaration, database, "shops", jobs_per_slot=4, connections=2) as slot:
        deadline = time.monotonic() + 20
        while slot.drain().outcomes["completed"] < 4:  # the failed job is retried after its millisecond
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert slot.summary.outcomes == {"completed": 4, "failed": 1}
    # The pages' transactions borrowed the slot's connections: its two and the process's listening one, no more.
    assert opened() <= 2 + 1
    assert writes_per_record(admin, schema) == {i: 4 for i in range(50)}
    assert {(r["status"], r["processed_count"]) for r in rows(admin, schema)} == {("completed", 50)}


def count_connects(database) -> Callable[[], int]:
    """From now on, count the connections ``database`` opens (sessions', pages' own, the listener's); the count."""
    opened = [0]
    real = database.connect

    def connect():
        opened[0] += 1
        return real()

    database.connect = connect
    return lambda: opened[0]


@pytest.mark.parametrize("jobs_per_slot", [1, 2])
def test_a_page_left_behind_lands_nothing_even_while_the_slot_s_next_page_is_open(
    database_url, with_records, admin, jobs_per_slot
):
    """acme's page outlives its timeout and tries to land once globex's page (the slot's next) has landed its rows
    and not yet committed them: acme's rows are refused, never committed with globex's cursor."""
    schema = with_records
    records = Destination(f"{schema}.records", key=("owner", "id"), owner="owner", compare=False)
    globex_landed, zombie_tried = threading.Event(), threading.Event()
    refused: list[BaseException] = []

    def handler(job: Job) -> Page:
        if job.owner == "acme":
            assert globex_landed.wait(20)  # long past its 1 s timeout: the slot has left it behind
            try:
                records.land(job, [{"id": 1000 + i, "page": "late"} for i in range(3)])
            except BaseException as exc:  # noqa: BLE001 - what the late page was told
                refused.append(exc)
            zombie_tried.set()
            return Page(None, 3)
        records.land(job, [{"id": i, "page": None} for i in range(3)])
        globex_landed.set()
        assert zombie_tried.wait(20)
        return Page(None, 3)

    declaration = declare(
        schema,
        products(handler, page_timeout=timedelta(seconds=1)),
        owner_source=owners("acme", "globex"),
        retry_delay=timedelta(hours=1),
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.enqueue("shops", "acme", "products", key="a")
    slot = (
        WorkerSlot(declaration, database, "shops")
        if jobs_per_slot == 1
        else MultiSlot(declaration, database, "shops", jobs_per_slot=2, connections=2)
    )
    with slot:
        assert slot.drain().outcomes == {"failed": 1}  # acme's page timed out, and still runs
        with Operations(declaration, database) as ops:
            ops.enqueue("shops", "globex", "products", key="a")
        assert slot.drain().outcomes == {"failed": 1, "completed": 1}  # globex's job, on the seat acme's left
    stored = admin.execute(sql.SQL("SELECT owner, id FROM {}.records").format(sql.Identifier(schema))).fetchall()
    assert sorted((r["owner"], r["id"]) for r in stored) == [("globex", i) for i in range(3)]
    assert len(refused) == 1 and "not landed" in str(refused[0])
