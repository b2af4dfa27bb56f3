"""What a job's pages landed (inserted, updated, unchanged, stale, deleted) is on its row, written by the
statements that save its cursor and complete it, added up across pages and attempts; its log line and the
asset event's extra say the same."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import Destination, Job, LandCounts, Operations, Page, WorkerSlot
from synclane_provider.core.run.arrivals import Arrivals
from synclane_provider.core.run.runner import Outcome
from synclane_provider.core.run.summary import Summary
from tests.support.helpers import declare, products, rows
from tests.test_landing import item

PAGES: dict[str | None, tuple[list[dict], str | None]] = {
    None: ([item(0, 1), item(1, 1), item(2, 2, name="renamed"), item(3, 0)], "2"),  # 2 unchanged, 1 updated, 1 stale
    "2": ([item(10, 1), item(11, 1), item(4, 1), item(5, 1)], "3"),  # 2 inserted, 2 unchanged
    # 1 unchanged, 1 updated, 1 inserted, 1 stale; completes: 8 and 9, not seen, are deleted
    "3": ([item(6, 1), item(7, 2, name="renamed"), item(12, 1), item(3, 0)], None),
}
LAST_PAGE = LandCounts(inserted=1, updated=1, unchanged=1, stale=1, deleted=2)


def seed(admin: psycopg.Connection, schema: str) -> None:
    """acme's ten stored rows (ids 0-9, version 1)."""
    for i in range(10):
        row = item(i, 1)
        admin.execute(
            sql.SQL("INSERT INTO {}.items VALUES ('acme', %s, %s, %s, %s)").format(sql.Identifier(schema)),
            [row["id"], row["updated_at"], row["name"], row["price"]],
        )


def counts_of(admin: psycopg.Connection, schema: str) -> LandCounts:
    [job] = rows(admin, schema)
    return LandCounts(*(job[f"{name}_count"] for name in ("inserted", "updated", "unchanged", "stale", "deleted")))


@pytest.mark.parametrize(
    ("elsewhere", "before_last"),
    [
        # the jobs database: the failed page rolled back with its counts; the retry lands and counts it once
        (False, LandCounts(inserted=2, updated=1, unchanged=4, stale=1)),
        # another database: the failed page's rows were committed, its counts were not; landed again by the
        # retry they are unchanged
        (True, LandCounts(inserted=0, updated=1, unchanged=6, stale=1)),
    ],
    ids=["jobs-database", "another-database"],
)
def test_a_jobs_row_counts_what_its_pages_landed_across_pages_and_attempts(
    elsewhere, before_last, database_url, schema, landing_schema, admin, caplog
):
    expected = before_last + LAST_PAGE
    seed(admin, landing_schema)
    saved: list[LandCounts] = []
    items = Destination(
        f"{landing_schema}.items",
        key=("account", "id"),
        owner="account",
        version="updated_at",
        deletions="delete",
        conninfo=database_url if elsewhere else None,
    )

    def handler(job: Job) -> Page:
        page, following = PAGES[job.cursor]
        if following is None:
            saved.append(counts_of(admin, schema))  # as the cursor saves left the row before the last page
        items.land(job, page, complete=following is None)
        if job.cursor == "2" and job.attempt_count == 1:
            raise RuntimeError("the page broke after landing")
        return Page(following, len(page))

    declaration = declare(schema, products(handler), retry_delay=timedelta(milliseconds=1))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    slot = WorkerSlot(declaration, database, "shops")
    summary = Summary()
    try:
        first = slot.run_one(then_continue=False)
        assert first.outcome is Outcome.FAILED, first.describe()
        assert counts_of(admin, schema) == LandCounts(updated=1, unchanged=2, stale=1)  # the first page's, saved
        time.sleep(0.05)
        second = None
        with caplog.at_level(logging.INFO):
            while second is None:
                second = slot.run_one(then_continue=False)
        assert second.outcome is Outcome.COMPLETED, second.describe()
        summary.add(second)
    finally:
        slot.close()
        items.close()
    assert saved == [before_last]
    assert counts_of(admin, schema) == expected
    assert second.landed == expected
    assert f"(rows {expected.describe()})" in caplog.text  # the job's log line
    extra = summary.arrivals.extra("shops", "products")
    assert extra["landed"] == extra["owners"]["acme"]["landed"] == dict(zip(
        ("inserted", "updated", "unchanged", "stale", "deleted"), expected.as_list(), strict=True))  # fmt: skip
    assert Arrivals.from_dict(summary.arrivals.as_dict()).extra("shops", "products") == extra  # through a deferral


def test_a_page_that_lands_nothing_leaves_the_counts_as_they_were(database_url, schema, admin):
    def handler(job: Job) -> Page:
        return Page("next" if job.cursor is None else None, 1)

    declaration = declare(schema, products(handler))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    admin.execute(sql.SQL("UPDATE {}.jobs SET inserted_count = 7, stale_count = 3").format(sql.Identifier(schema)))
    slot = WorkerSlot(declaration, database, "shops")
    try:
        result = slot.run_one(then_continue=False)
    finally:
        slot.close()
    assert result.outcome is Outcome.COMPLETED
    assert counts_of(admin, schema) == LandCounts(inserted=7, stale=3)
