"""Bad input: odd and oversized names, a long schema name, handler results and exceptions of every kind.

Each either gets a clear error naming what is wrong, or is stored safely and comes back exactly as it went
in; and no row is ever left running without a live lease. (Wrong page types, huge errors with NUL and a
KeyboardInterrupt mid-job are covered in test_running_jobs.py and test_operations.py; schema names that
are not identifiers in test_declarations.py.)
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import (
    DeclarationError,
    Job,
    JobThrottled,
    Operations,
    Owner,
    Page,
    Queue,
    SnapshotType,
    SyncLane,
    WorkerSlot,
)
from synclane_provider.core.db.wakeups import channel
from synclane_provider.core.run.runner import Outcome
from tests.support.database import drop_schemas
from tests.support.helpers import declare, failing, owners, paged, products, rows

ODD_NAMES = [
    'it\'s "quoted"; DROP TABLE jobs; --',
    "ünïcødé ✓ 日本語 🚀",
    "back\\slash %s %(owner)s {schema} $1",
    " padded\twith\nwhitespace ",
    "é" * 256,  # 512 bytes: the longest name allowed
]


def no_running_row_without_a_live_lease(admin, schema) -> None:
    stale = admin.execute(
        sql.SQL(
            "SELECT id, status, lease_expires_at FROM {}.jobs "
            "WHERE status = 'running' AND (leased_by IS NULL OR lease_expires_at <= now())"
        ).format(sql.Identifier(schema))
    ).fetchall()
    assert stale == []


@pytest.mark.parametrize("name", ODD_NAMES, ids=["quotes", "unicode", "placeholders", "whitespace", "512-bytes"])
def test_odd_names_round_trip_exactly_through_plan_run_and_operations(schema, database_url, admin, name):
    seen = []
    lane = name[:-1] + "|"  # a lane of its own name, as long as the name

    def handler(job: Job) -> Page:
        seen.append((job.queue, job.owner, job.lane, job.type, job.cursor))
        return Page(name if job.cursor is None else None, 1)  # the name is a cursor too

    synclane = SyncLane(
        queues=[
            Queue(
                name,
                owners=owners(Owner(name, lane=lane)),
                types=[SnapshotType(name, handler, every=timedelta(days=1))],
            )
        ],
        schema=schema,
    )
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops, psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema))))
        assert ops.plan(name).inserted == {name: 1}
        [note] = list(listener.notifies(timeout=10, stop_after=1))
        assert note.payload == name  # idle workers of exactly this queue are woken

        slot = WorkerSlot(synclane, database, name)
        assert slot.run_one().outcome is Outcome.COMPLETED
        slot.close()
        assert seen == [(name, name, lane, name, None), (name, name, lane, name, name)]

        [job] = ops.list_jobs(name, owner=name, type=name)
        assert (job.queue, job.owner, job.lane, job.type, job.cursor) == (name, name, lane, name, name)
        assert ops.progress(name, name, type=name).complete
        manual = ops.enqueue(name, name, name, key=name)
        assert (manual.dedup_key, manual.lane) == (f"manual:{name}", lane)
        assert ops.cancel(name, name, reason=name).abandoned == 1
        [cancelled] = ops.list_jobs(name, owner=name, status="abandoned")
        assert cancelled.error == f"Cancelled: {name}"
        assert ops.requeue(name, owner=name, type=name) == 1
    no_running_row_without_a_live_lease(admin, schema)


TOO_LONG = "x" * 10_000
MULTIBYTE = "é" * 257  # 514 bytes in UTF-8, only 257 characters


@pytest.mark.parametrize(
    "value",
    [TOO_LONG, MULTIBYTE, "lone \udcff surrogate", "nul\x00inside"],
    ids=["10kB", "514-bytes", "surrogate", "nul"],
)
@pytest.mark.parametrize("where", ["queue", "type", "owner", "lane"])
def test_names_the_table_cannot_hold_are_refused_when_declared(where, value):
    arguments = {"queue": "shops", "type": "products", "owner": "acme", "lane": None, where: value}
    with pytest.raises(DeclarationError, match=r"must (be at most 512 bytes|be valid unicode|not contain NUL)"):
        Queue(
            arguments["queue"],
            owners=owners(),
            types=[SnapshotType(arguments["type"], paged(0), every=timedelta(days=1))],
        )
        Owner(arguments["owner"], lane=arguments["lane"])


def test_an_owner_source_listing_an_oversized_owner_fails_the_plan_clearly_and_inserts_nothing(
    schema, database_url, admin
):
    synclane = declare(schema, products(), owner_source=lambda queue: ["acme", TOO_LONG])
    with Operations(synclane, synclane.database(database_url)) as ops:
        with pytest.raises(DeclarationError, match="owner id must be at most 512 bytes"):
            ops.plan("shops")
    assert rows(admin, schema) == []


@pytest.mark.parametrize("key", [TOO_LONG, "nul\x00key", ""], ids=["10kB", "nul", "empty"])
def test_an_enqueue_key_the_table_cannot_hold_is_refused(schema, database_url, admin, key):
    synclane = declare(schema, products())
    with Operations(synclane, synclane.database(database_url)) as ops:
        with pytest.raises(DeclarationError, match="key must"):
            ops.enqueue("shops", "acme", "products", key=key)
    assert rows(admin, schema) == []


def test_a_cancel_reason_is_stored_bounded_and_safe(schema, database_url, admin):
    synclane = declare(schema, products())
    with Operations(synclane, synclane.database(database_url)) as ops:
        ops.plan("shops")
        assert ops.cancel("shops", "acme", reason="gone\x00" + "y" * 100_000).abandoned == 1
    [row] = rows(admin, schema)
    assert row["error"].startswith("Cancelled: gone\\0yyy") and len(row["error"]) == 2000


def test_the_longest_schema_name_works_end_to_end_including_wake_ups(database_url, admin):
    name = "s" * 63
    synclane = declare(name, products())
    try:
        with Operations(synclane, synclane.database(database_url)) as ops:
            with psycopg.connect(database_url, autocommit=True) as listener:
                listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(name))))
                assert ops.plan("shops").total == 1
                assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["shops"]
            assert len(channel(name).encode()) <= 63
            assert channel(name) != channel("s" * 62 + "t")
    finally:
        drop_schemas(admin, name)


# --- what handlers return and raise -------------------------------------------------------------------------


@pytest.fixture
def run_once(schema, database_url, admin):
    """Plan one job around ``handler``, run it once, and return the result and the row."""

    def run(handler, **settings):
        synclane = declare(schema, products(handler), **settings)
        database = synclane.database(database_url)
        with Operations(synclane, database) as ops:
            ops.plan("shops")
        slot = WorkerSlot(synclane, database, "shops")
        try:
            result = slot.run_one()
        finally:
            slot.close()
        [row] = rows(admin, schema)
        no_running_row_without_a_live_lease(admin, schema)
        return result, row

    return run


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (Page("bad \udcff cursor", 5), "returned a next_cursor that is not valid unicode"),
        (Page("x\x00y", 5), "returned a next_cursor containing NUL"),
        (Page("x", True), "returned count True, expected an integer of zero or more"),
        (Page("x", 2**63), "returned count 9223372036854775808, more than the table can count"),
        ({"next_cursor": "x", "count": 1}, "returned dict {'next_cursor': 'x', 'count': 1}, expected a Page"),
    ],
    ids=["surrogate-cursor", "nul-cursor", "bool-count", "huge-count", "dict"],
)
def test_a_page_the_table_cannot_hold_fails_the_job_clearly_instead_of_stranding_it(run_once, returned, message):
    result, row = run_once(lambda job: returned)
    assert result.outcome is Outcome.FAILED
    assert (row["status"], row["cursor"], row["processed_count"], row["leased_by"]) == ("failed", None, 0, None)
    assert row["error"].startswith("HandlerResultError: ") and message in row["error"]


def test_counts_that_together_pass_what_the_table_can_count_fail_the_job_at_the_page_that_overflows(run_once):
    def handler(job: Job) -> Page:
        return Page(str(int(job.cursor or 0) + 1), 2**62)

    result, row = run_once(handler)
    assert result.outcome is Outcome.FAILED
    assert (row["cursor"], row["processed_count"]) == ("1", 2**62)
    assert "more than the table can count" in row["error"]


def test_a_huge_unicode_cursor_round_trips_exactly(run_once):
    cursor = "'; DROP TABLE jobs; -- \\ ünï 🚀 " * 20_000  # about 700 kB
    received = []

    def handler(job: Job) -> Page:
        received.append(job.cursor)
        return Page(cursor, 1) if job.cursor is None else Page(None, 1)

    result, row = run_once(handler)
    assert result.outcome is Outcome.COMPLETED
    assert received == [None, cursor]
    assert row["cursor"] == cursor


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@pytest.mark.parametrize(
    ("raised", "stored"),
    [
        (ValueError(b"\xff\xfe raw bytes"), "ValueError: b'\\xff\\xfe raw bytes'"),
        (Unprintable(), "Unprintable: <unprintable Unprintable>"),
        (RuntimeError("é\x00" * 5000), ("RuntimeError: " + "é\\0" * 5000)[:1999] + "…"),
        (type("Ärger🚀", (Exception,), {})("emoji class"), "Ärger🚀: emoji class"),
    ],
    ids=["bytes", "broken-str", "nul-multibyte-huge", "unicode-class"],
)
def test_exceptions_of_every_shape_are_stored_bounded_and_readable(run_once, raised, stored):
    result, row = run_once(failing(raised))
    assert result.outcome is Outcome.FAILED
    assert row["error"] == stored and len(row["error"]) <= 2000


@pytest.mark.parametrize(
    ("retry_after", "message"),
    [
        (timedelta.max, "retry_after must be at most"),
        (float("nan"), "cannot convert float NaN to integer"),
        ("30", "retry_after must be a timedelta or a number of seconds"),
    ],
    ids=["centuries", "nan", "string"],
)
def test_a_throttle_with_an_impossible_wait_fails_the_job_with_a_clear_error(run_once, retry_after, message):
    def handler(job: Job) -> Page:
        raise JobThrottled("slow down", retry_after=retry_after)

    result, row = run_once(handler)
    assert result.outcome is Outcome.FAILED
    assert row["status"] == "failed" and message in row["error"]


class TaskTimeout(BaseException):
    """Like Airflow's task timeout: not an Exception, raised into whatever the task was doing."""


@pytest.mark.parametrize("interrupt", [TaskTimeout, GeneratorExit, KeyboardInterrupt, SystemExit])
def test_any_interrupt_inside_a_page_hands_the_job_back_with_its_cursor_and_propagates(
    schema, database_url, admin, interrupt
):
    def handler(job: Job) -> Page:
        if job.cursor == "100":
            raise interrupt()
        return paged(300, 50)(job)

    synclane = declare(schema, products(handler))
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        ops.plan("shops")
    slot = WorkerSlot(synclane, database, "shops")
    with pytest.raises(interrupt):
        slot.run_one()
    slot.close()
    [row] = rows(admin, schema)
    assert (row["status"], row["cursor"], row["processed_count"], row["attempt_count"], row["leased_by"]) == (
        "pending",
        "100",
        100,
        0,
        None,
    )
