"""A snapshot's deletions: the owner's rows it did not see go (or are marked deleted) when it completes, never
when it saw nothing or when more than the declared share would go; a requeue with force goes ahead."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import Destination, LandCounts, LandingError, Operations, Page, WorkerSlot
from synclane_provider.core.run.runner import Outcome
from tests.support.helpers import Background, Recorder, declare, products, rows
from tests.test_landing import item, job_of

ACME, GLOBEX = job_of("acme"), job_of("globex")


def snapshot(job, number: int):
    """The ``number``-th snapshot job of the owner (a job id of its own)."""
    return dataclasses.replace(job, id=number)


@pytest.fixture
def catalogue(landing_schema: str, database_url: str) -> Iterator[Destination]:
    dest = Destination(
        f"{landing_schema}.items", key=("account", "id"), owner="account", deletions="delete", conninfo=database_url
    )
    yield dest
    dest.close()


def ids(admin: psycopg.Connection, schema: str, account: str = "acme", where: str = "true") -> list[int]:
    found = admin.execute(
        sql.SQL("SELECT id FROM {}.items WHERE account = %s AND " + where + " ORDER BY id").format(
            sql.Identifier(schema)
        ),
        [account],
    )
    return [r["id"] for r in found]


def test_the_rows_a_completed_snapshot_did_not_see_are_deleted_and_only_its_owners(catalogue, admin, landing_schema):
    catalogue.land(snapshot(ACME, 1), [item(i, 1) for i in range(10)], complete=True)
    catalogue.land(snapshot(GLOBEX, 2), [item(i, 1) for i in range(3)], complete=True)
    second = snapshot(ACME, 3)
    assert catalogue.land(second, [item(i, 1) for i in range(5)]) == LandCounts(unchanged=5)
    assert ids(admin, landing_schema) == list(range(10))  # nothing goes before the snapshot completes
    assert catalogue.land(second, [item(i, 1) for i in range(5, 8)], complete=True) == LandCounts(
        unchanged=3, deleted=2
    )
    assert ids(admin, landing_schema) == list(range(8))
    assert ids(admin, landing_schema, "globex") == [0, 1, 2]


def test_a_snapshot_that_saw_nothing_deletes_nothing_and_fails_whatever_its_share(landing_schema, database_url, admin):
    everything = Destination(f"{landing_schema}.items", key=("account", "id"), owner="account", deletions="delete",
                             deletion_share=1.0, conninfo=database_url)  # fmt: skip
    try:
        everything.land(snapshot(ACME, 1), [item(i, 1) for i in range(4)], complete=True)
        with pytest.raises(
            LandingError, match=r"saw 0 row\(s\) and would delete 4 of the owner's 4 row\(s\), it saw none"
        ):
            everything.land(snapshot(ACME, 2), [], complete=True)
        assert ids(admin, landing_schema) == [0, 1, 2, 3]
        assert everything.land(snapshot(ACME, 3), [item(0, 1)], complete=True).deleted == 3  # all but one: allowed
    finally:
        everything.close()


def test_more_than_the_share_fails_naming_both_counts_and_nothing_of_the_page_is_written(
    catalogue, admin, landing_schema
):
    catalogue.land(snapshot(ACME, 1), [item(i, 1) for i in range(10)], complete=True)
    refused = snapshot(ACME, 2)
    with pytest.raises(
        LandingError, match=r"would delete 6 of the owner's 10 row\(s\), more than the declared share \(50%\)"
    ):
        catalogue.land(refused, [item(0, 1), item(1, 1), item(2, 1), item(3, 2, name="changed")], complete=True)
    assert ids(admin, landing_schema) == list(range(10))
    assert ids(admin, landing_schema, where="name = 'changed'") == []  # the refused page rolled back whole
    assert catalogue.land(refused, [item(i, 1) for i in range(5)], complete=True) == LandCounts(
        unchanged=5, deleted=5
    )  # exactly the share: allowed
    forced = dataclasses.replace(snapshot(ACME, 3), force_deletions=True)
    assert catalogue.land(forced, [item(0, 1)], complete=True).deleted == 4
    assert ids(admin, landing_schema) == [0]


def test_marked_deleted_rows_keep_their_mark_until_they_come_back(landing_schema, database_url, admin):
    admin.execute(sql.SQL("ALTER TABLE {} ADD COLUMN deleted_at timestamptz").format(
        sql.Identifier(landing_schema, "items")))  # fmt: skip
    dest = Destination(f"{landing_schema}.items", key=("account", "id"), owner="account", deletions="mark",
                       deleted_column="deleted_at", conninfo=database_url)  # fmt: skip
    try:
        dest.land(snapshot(ACME, 1), [item(i, 1) for i in range(4)], complete=True)
        assert dest.land(snapshot(ACME, 2), [item(0, 1), item(1, 1), item(2, 1)], complete=True).deleted == 1
        assert ids(admin, landing_schema, where="deleted_at IS NOT NULL") == [3]
        assert dest.land(snapshot(ACME, 3), [item(0, 1), item(1, 1), item(2, 1)], complete=True).deleted == 0
        assert dest.land(snapshot(ACME, 4), [item(i, 1) for i in range(4)], complete=True) == LandCounts(
            unchanged=3, updated=1
        )
        assert ids(admin, landing_schema, where="deleted_at IS NOT NULL") == []
    finally:
        dest.close()


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"deletions": "drop", "owner": "a"}, "deletions must be 'delete', 'mark' or None, not 'drop'"),
        ({"deletions": "delete"}, "deletions need the owner column"),
        ({"deletions": "mark", "owner": "a"}, "deletions='mark' needs deleted_column"),
        ({"deletions": "delete", "owner": "a", "deletion_share": 0}, "deletion_share must be a share above 0"),
        ({"deletions": "delete", "owner": "a", "deletion_share": 1.5}, "deletion_share must be a share above 0"),
    ],
)
def test_deletions_that_cannot_work_are_refused_when_declared(kwargs, complaint):
    with pytest.raises(Exception, match=complaint):
        Destination("t", key=("id",), **kwargs)


def test_a_requeue_with_force_lets_the_refused_snapshot_delete(database_url, schema, admin):
    declaration = declare(schema, products())
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
        [job] = rows(admin, schema)
        admin.execute(sql.SQL("UPDATE {}.jobs SET status = 'failed'").format(sql.Identifier(schema)))
        assert ops.requeue("shops", owner="acme") == 1
        assert ops.job(job["id"]).force_deletions is False
        admin.execute(sql.SQL("UPDATE {}.jobs SET status = 'failed'").format(sql.Identifier(schema)))
        assert ops.requeue("shops", owner="acme", force_deletions=True) == 1
        assert ops.job(job["id"]).force_deletions is True


def test_force_stays_set_through_a_later_requeue_without_it(database_url, schema, admin):
    """The forced job is the one a person decided on: a requeue of its owner afterwards (after a failure that had
    nothing to do with deletions) does not take the decision back."""
    declaration = declare(schema, products())
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops")
        [job] = rows(admin, schema)
        admin.execute(sql.SQL("UPDATE {}.jobs SET status = 'abandoned'").format(sql.Identifier(schema)))
        assert ops.requeue("shops", job_id=job["id"], force_deletions=True) == 1
        admin.execute(sql.SQL("UPDATE {}.jobs SET status = 'failed'").format(sql.Identifier(schema)))
        assert ops.requeue("shops", owner="acme") == 1
        assert ops.job(job["id"]).force_deletions is True


def test_a_refused_deletion_ends_the_job_abandoned_at_once_and_a_forced_requeue_finishes_its_last_page(
    landing_schema, database_url, schema, admin, clock
):
    """A retry cannot change the share a snapshot would delete, only a person can: the first refusal ends the job
    abandoned, saying how to go ahead, without fetching its last page again for every attempt; a requeue with
    force continues from the cursor the refusal left, and lands and deletes what the refused page would have."""
    catalogue = Destination(f"{landing_schema}.items", key=("account", "id"), owner="account", deletions="delete")
    stored = Destination(f"{landing_schema}.items", key=("account", "id"), owner="account", conninfo=database_url)
    stored.land(ACME, [item(i, 1) for i in range(10)])
    stored.close()

    def two_pages(job):
        first = job.cursor is None
        catalogue.land(job, [item(0, 1), item(1, 1)] if first else [item(2, 1)], complete=not first)
        return Page("1" if first else None, 2 if first else 1)

    pages = Recorder(two_pages)
    declaration = declare(schema, products(pages), max_attempts=5, retry_delay=timedelta(seconds=1))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as slot,
    ):
        ops.plan("shops")
        refused = slot.run_one(then_continue=False)
        assert refused.outcome is Outcome.ABANDONED, refused.describe()
        [job] = rows(admin, schema)
        assert (job["status"], job["attempt_count"], job["cursor"]) == ("abandoned", 1, "1")
        assert "would delete 7 of the owner's 10 row(s)" in job["error"]
        assert "requeue the job with force_deletions" in job["error"]
        assert ids(admin, landing_schema) == list(range(10))  # nothing of the refused page, nothing deleted
        clock.advance(timedelta(hours=1))
        assert slot.run_one(then_continue=False) is None  # nothing retried on its own

        assert ops.requeue("shops", job_id=job["id"], force_deletions=True) == 1
        assert slot.run_one(then_continue=False).outcome is Outcome.COMPLETED
    assert pages.calls == [(job["id"], None), (job["id"], "1"), (job["id"], "1")]
    assert ids(admin, landing_schema) == [0, 1, 2]


def test_workers_landing_their_first_snapshot_pages_at_once_all_land(landing_schema, database_url, admin):
    """Each worker process finds the table of keys seen missing at its first page and creates it: eight at once
    all land (creating one table twice at the same moment collides in PostgreSQL's catalogue)."""
    workers = [
        Destination(f"{landing_schema}.items", key=("account", "id"), owner="account", deletions="delete",
                    conninfo=database_url)
        for _ in range(8)
    ]  # fmt: skip
    start = threading.Barrier(len(workers))

    def first_page(number: int, dest: Destination) -> LandCounts:
        start.wait(timeout=30)
        return dest.land(snapshot(job_of(f"owner{number}"), number), [item(i, 1) for i in range(3)])

    try:
        landing = [Background(functools.partial(first_page, n, d), name=f"land-{n}") for n, d in enumerate(workers)]
        assert [run.result(60) for run in landing] == [LandCounts(inserted=3)] * len(workers)
    finally:
        for dest in workers:
            dest.close()
    assert sum(len(ids(admin, landing_schema, f"owner{n}")) for n in range(len(workers))) == 3 * len(workers)
