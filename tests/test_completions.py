"""Reading completed work once: what a queue completed since a reader's mark, read from the table, each completion
once -- announced, folded per type and owner (the ``extra`` of the asset events downstream DAGs run on), and
tallied into each owner's records (all its work, for the operator's views)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from synclane_provider.core import Operations, Owner, WorkerSlot
from synclane_provider.core.ops.operations import ANNOUNCE_SETTLE, FIRST_LOOK
from tests.support.helpers import declare, execute, orders, owners, paged, products, race, rows

UTC = timezone.utc
SECOND = timedelta(seconds=1)


@pytest.fixture
def declaration(schema):
    return declare(
        schema,
        products(paged(30)),
        orders(paged(120, 50)),
        owner_source=owners("acme", Owner("globex", lane="shared"), Owner("initech", lane="shared")),
    )


@pytest.fixture
def ops(declaration, database_url):
    with Operations(declaration, declaration.database(database_url)) as operations:
        yield operations


@pytest.fixture
def drain(declaration, database_url, clock):
    """Runs every due job of the queue at the pinned clock: each completes at ``clock.now``."""
    slot = WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock)
    yield lambda: slot.drain()
    slot.close()


def extras(landed) -> dict[str, dict]:
    return {type_name: landed.extra("shops", type_name) for type_name in sorted(landed.by_type)}


def test_what_completed_since_the_last_announcement_is_announced_once_per_type_and_owner(
    ops, drain, admin, schema, clock
):
    ops.plan("shops", now=clock.now)
    drain()
    announced = extras(ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE))

    completed = rows(admin, schema, "status = 'completed'")
    assert sorted(announced) == ["orders", "products"]
    for type_name, extra in announced.items():
        mine = [r for r in completed if r["type"] == type_name]
        assert (extra["jobs"], extra["records"]) == (len(mine), sum(r["processed_count"] for r in mine))
        for owner in ("acme", "globex", "initech"):
            theirs = [r for r in mine if r["owner"] == owner]
            assert extra["owners"][owner]["jobs"] == len(theirs)
            if type_name == "orders":
                assert (extra["owners"][owner]["window_start"], extra["owners"][owner]["window_end"]) == (
                    min(r["window_start"] for r in theirs).isoformat(),
                    max(r["window_end"] for r in theirs).isoformat(),
                )
    assert extras(ops.announce("shops", now=clock.now + 2 * ANNOUNCE_SETTLE)) == {}  # nothing twice

    clock.advance(timedelta(minutes=20))  # the next recurring windows come due and complete
    ops.plan("shops", now=clock.now)
    drain()
    later = extras(ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE))
    fresh = rows(admin, schema, "status = 'completed' AND completed_at = %s", [clock.now])
    assert fresh and {t: e["jobs"] for t, e in later.items()} == {"orders": len(fresh)}


def test_a_completion_of_the_last_seconds_waits_for_the_next_announcement_and_is_not_lost(ops, drain, clock):
    ops.plan("shops", now=clock.now)
    drain()
    assert extras(ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE - SECOND)) == {}  # not settled yet
    assert sorted(extras(ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE))) == ["orders", "products"]


def test_the_first_announcement_of_a_queue_reaches_back_only_so_far(ops, drain, clock):
    ops.plan("shops", now=clock.now)
    drain()
    assert extras(ops.announce("shops", now=clock.now + FIRST_LOOK + ANNOUNCE_SETTLE + SECOND)) == {}


def test_a_resync_is_announced_as_the_windows_it_fetched_again_apart_from_the_owners_new_data(
    ops, drain, admin, schema, clock
):
    ops.plan("shops", now=clock.now)
    drain()
    ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE)
    clock.advance(timedelta(minutes=1))
    march, april = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC)
    ops.resync("shops", "orders", march, april, owners=["globex"], reason="bad totals", key="march", now=clock.now)
    drain()

    [orders_extra] = extras(ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE)).values()
    assert (orders_extra["jobs"], orders_extra["owners"]) == (0, {})  # nothing new, only March again
    fetched_again = rows(admin, schema, "request_key = 'march'", order="window_start DESC")
    assert orders_extra["resyncs"] == {
        "march": {
            "globex": [
                {
                    "window_start": r["window_start"].isoformat(),
                    "window_end": r["window_end"].isoformat(),
                    "records": 120,
                }
                for r in fetched_again
            ]
        }
    }


def test_announcements_racing_each_other_announce_every_completion_exactly_once(
    ops, declaration, database_url, admin, schema, clock
):
    ops.plan("shops", now=clock.now)
    ops.announce("shops", now=clock.now)  # the queue's mark: ANNOUNCE_SETTLE before now
    done = rows(admin, schema)
    for n, row in enumerate(done):  # completions a second apart after the mark
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET status = 'completed', processed_count = 1, completed_at = %s WHERE id = %s",
            [clock.now - ANNOUNCE_SETTLE + (n + 1) * SECOND, row["id"]],
        )
    announcers = [Operations(declaration, declaration.database(database_url)) for _ in range(6)]
    announced = 0
    try:
        for quarter in range(1, 5):  # each round's announcers race over a quarter of the completions
            upto = clock.now + quarter * len(done) * SECOND / 4
            found = race(
                [
                    lambda mine=mine, n=n: mine.announce("shops", now=upto - n * SECOND)
                    for n, mine in enumerate(announcers)
                ]
            )
            announced += sum(extra["jobs"] for landed in found for extra in extras(landed).values())
            reached = upto - ANNOUNCE_SETTLE
            assert announced == len([r for r in done if r["id"] in completed_by(admin, schema, reached)])
        assert announced == len(done)
    finally:
        for mine in announcers:
            mine.close()


def completed_by(admin, schema, instant: datetime) -> set[int]:
    return {r["id"] for r in rows(admin, schema, "status = 'completed' AND completed_at <= %s", [instant])}


def owners_records(admin, schema) -> dict[str, int]:
    return {r["owner"]: r["records"] for r in admin.execute(f'SELECT owner, records FROM "{schema}".owners').fetchall()}


def test_a_tally_adds_every_job_an_owner_completed_to_its_records_once_whatever_its_mode(
    ops, drain, admin, schema, clock
):
    ops.plan("shops", now=clock.now)
    drain()
    march, april = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC)
    ops.resync("shops", "orders", march, april, owners=["globex"], reason="bad totals", key="march", now=clock.now)
    ops.enqueue("shops", "initech", "products", key="by-hand", now=clock.now)
    drain()
    assert ops.tally_records("shops", now=clock.now + ANNOUNCE_SETTLE - SECOND) == 0  # not settled yet
    assert ops.tally_records("shops", now=clock.now + ANNOUNCE_SETTLE) == 3

    stored = {}
    for row in rows(admin, schema, "status = 'completed'"):
        stored[row["owner"]] = stored.get(row["owner"], 0) + row["processed_count"]
    assert owners_records(admin, schema) == stored
    assert ops.tally_records("shops", now=clock.now + 2 * ANNOUNCE_SETTLE) == 0
    assert owners_records(admin, schema) == stored  # nothing counted twice

    clock.advance(timedelta(minutes=20))  # the next recurring windows come due and complete
    ops.plan("shops", now=clock.now)
    drain()
    ops.tally_records("shops", now=clock.now + ANNOUNCE_SETTLE)
    assert sum(owners_records(admin, schema).values()) == sum(r["processed_count"] for r in rows(admin, schema))


def test_announcing_and_tallying_keep_marks_of_their_own(ops, drain, admin, schema, clock):
    ops.plan("shops", now=clock.now)
    drain()
    assert sorted(extras(ops.announce("shops", now=clock.now + ANNOUNCE_SETTLE))) == ["orders", "products"]
    assert ops.tally_records("shops", now=clock.now + ANNOUNCE_SETTLE) == 3  # the announcement read none for it
