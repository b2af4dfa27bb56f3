"""Planning: what should exist minus what exists, repeatable, gap-free, and safe under races."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from synclane_provider.core import (
    DeclarationError,
    Operations,
    Owner,
    Queue,
    SyncLane,
    UnknownOwnerError,
    WorkerSlot,
)
from synclane_provider.core.errors import OwnerSourceError
from synclane_provider.core.plan import planner
from tests.support.helpers import Background, declare, execute, orders, owners, products, race, rows

DAY = timedelta(days=1)
UTC = timezone.utc


def windows(admin, schema, owner="acme", type="orders"):
    return sorted(
        (r["window_start"], r["window_end"]) for r in rows(admin, schema, "owner = %s AND type = %s", [owner, type])
    )


def assert_no_gap(spans, start, end):
    """The union of the windows covers [start, end] without a hole."""
    reach = start
    for window_start, window_end in sorted(spans):
        assert window_start <= reach, f"gap from {reach} to {window_start}"
        reach = max(reach, window_end)
    assert reach >= end, f"coverage stops at {reach}, before {end}"


@pytest.fixture
def ops(schema, database_url):
    made: list[Operations] = []

    def make(*types, owner_source=None, **settings):
        declaration = declare(schema, *types, owner_source=owner_source, **settings)
        made.append(Operations(declaration, declaration.database(database_url)))
        return made[-1]

    yield make
    for operations in made:
        operations.close()


def test_first_plan_slices_history_back_to_the_horizon_from_midnight(ops, admin, schema, clock):
    summary = ops(orders()).plan("shops", now=clock.now)

    assert summary.inserted == {"orders": 3}  # two 30-day slices and today's recurring job
    initial = rows(admin, schema, "mode = 'initial'", order="window_end DESC, id")
    midnight = datetime(2026, 11, 30, tzinfo=UTC)
    assert [(r["window_start"], r["window_end"]) for r in initial] == [
        (midnight - 30 * DAY, midnight),
        (midnight - 60 * DAY, midnight - 30 * DAY),
    ]
    assert initial[0]["dedup_key"] == "initial:2026-10-31T00:00:00Z"
    assert all(r["status"] == "pending" and r["lane"] == "acme" and r["priority"] == 0 for r in initial)
    [recurring] = rows(admin, schema, "mode = 'recurring'")
    assert (recurring["window_start"], recurring["window_end"]) == (
        midnight - timedelta(minutes=5),
        datetime(2026, 11, 30, 10, 15, tzinfo=UTC),
    )
    assert recurring["dedup_key"] == "recurring:2026-11-30T10:15:00Z"


def test_history_is_inserted_newest_first(ops, admin, schema, clock):
    ops(orders(horizon=timedelta(days=365))).plan("shops", now=clock.now)
    initial = rows(admin, schema, "mode = 'initial'")
    ends = [r["window_end"] for r in initial]
    assert ends == sorted(ends, reverse=True)


def test_repeated_planning_inserts_nothing(ops, admin, schema, clock):
    operations = ops(orders(), products())
    first = operations.plan("shops", now=clock.now)
    before = rows(admin, schema)
    for _ in range(3):
        assert operations.plan("shops", now=clock.now + timedelta(minutes=1)).total == 0
    assert rows(admin, schema) == before
    assert first.inserted == {"orders": 3, "products": 1}


def test_raising_the_horizon_adds_only_the_missing_older_slices(ops, admin, schema, clock):
    ops(orders(horizon=60 * DAY)).plan("shops", now=clock.now)
    before = {r["dedup_key"]: r["id"] for r in rows(admin, schema)}

    summary = ops(orders(horizon=730 * DAY)).plan("shops", now=clock.now)

    after = rows(admin, schema, "mode = 'initial'")
    added = [r for r in after if r["dedup_key"] not in before]
    assert summary.inserted == {"orders": len(added)}
    assert len(added) == 23  # 730 days = 24 slices of 30 days and one of 10; two existed
    midnight = datetime(2026, 11, 30, tzinfo=UTC)
    assert all(r["window_end"] <= midnight - 60 * DAY for r in added)
    assert_no_gap(windows(admin, schema), midnight - 730 * DAY, midnight)
    starts = [r["window_start"] for r in after]
    assert len(starts) == len(set(starts))


def test_a_planner_that_was_down_for_a_day_leaves_no_gap(ops, admin, schema, clock):
    operations = ops(orders())
    operations.plan("shops", now=clock.now)
    later = clock.now + timedelta(days=1, hours=3, minutes=7)

    summary = operations.plan("shops", now=later)

    assert summary.inserted == {"orders": 1}
    [newest] = rows(admin, schema, "mode = 'recurring'", order="window_end DESC LIMIT 1")
    assert newest["window_start"] == datetime(2026, 11, 30, 10, 15, tzinfo=UTC) - timedelta(minutes=5)
    assert newest["window_end"] == datetime(2026, 12, 1, 13, 15, tzinfo=UTC)
    assert_no_gap(windows(admin, schema), datetime(2026, 11, 30, tzinfo=UTC) - 60 * DAY, newest["window_end"])


def test_windows_cover_horizon_start_to_the_latest_period_over_many_plans(ops, admin, schema, clock):
    operations = ops(orders())
    now = clock.now
    for step in [timedelta(minutes=1), timedelta(minutes=14), timedelta(hours=5), timedelta(minutes=15), 2 * DAY]:
        now += step
        operations.plan("shops", now=now)
    latest = max(r["window_end"] for r in rows(admin, schema))
    assert latest == datetime(2026, 12, 2, 15, 45, tzinfo=UTC)
    assert_no_gap(windows(admin, schema), datetime(2026, 11, 30, tzinfo=UTC) - 60 * DAY, latest)


def test_snapshot_gets_one_initial_then_one_recurring_job_per_period(ops, admin, schema, clock):
    operations = ops(products(every=DAY))
    assert operations.plan("shops", now=clock.now).inserted == {"products": 1}
    assert operations.plan("shops", now=clock.now + timedelta(hours=5)).total == 0
    assert operations.plan("shops", now=clock.now + DAY).inserted == {"products": 1}
    assert operations.plan("shops", now=clock.now + DAY + timedelta(hours=1)).total == 0
    keys = [r["dedup_key"] for r in rows(admin, schema)]
    assert keys == ["initial", "recurring:2026-12-01T00:00:00Z"]


def test_owners_sharing_a_lane_get_that_lane(ops, admin, schema, clock):
    source = owners(Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"), "globex")
    ops(products(), owner_source=source).plan("shops", now=clock.now)
    assert {(r["owner"], r["lane"]) for r in rows(admin, schema)} == {
        ("acme-us", "acme"),
        ("acme-eu", "acme"),
        ("globex", "globex"),
    }


def test_owner_and_lane_names_with_quotes_backslashes_and_commas_are_planned_as_they_are(ops, admin, schema, clock):
    names = ['say "hi"', "back\\slash", "a,b", "{braces}", "NULL", "ünï cödé"]
    source = owners(*(Owner(name, lane=f"lane {name}") for name in names))
    operations = ops(products(), owner_source=source)
    operations.plan("shops", now=clock.now)

    assert {(r["owner"], r["lane"]) for r in rows(admin, schema)} == {(name, f"lane {name}") for name in names}
    assert operations.plan("shops", now=clock.now).total == 0  # each owner's coverage row is found again


def test_owners_beyond_one_read_and_one_insert_are_all_planned_once(ops, admin, schema, clock, monkeypatch):
    monkeypatch.setattr(planner, "READ_BATCH", 5)
    monkeypatch.setattr(planner, "INSERT_BATCH", 2)
    names = [f"owner-{number}" for number in range(12)]
    operations = ops(orders(), products(), owner_source=owners(*names))

    assert operations.plan("shops", now=clock.now).inserted == {"orders": 36, "products": 12}
    assert {name: len(windows(admin, schema, name)) for name in names} == {name: 3 for name in names}
    assert operations.plan("shops", now=clock.now).total == 0


def test_jobs_are_numbered_in_the_owner_sources_order_and_owners_of_one_coverage_share_their_jobs(
    ops, admin, schema, clock
):
    source = owners("initech", "globex", "acme")
    ops(orders(), owner_source=source).plan("shops", owner="initech", now=clock.now)  # 60 days back, no products
    before = len(rows(admin, schema))
    ops(orders(horizon=120 * DAY), products(), owner_source=source).plan("shops", now=clock.now)

    midnight = datetime(2026, 11, 30, tzinfo=UTC)
    slices = [("initial", midnight - (n + 1) * 30 * DAY, midnight - n * 30 * DAY) for n in range(4)]  # newest first
    recurring = ("recurring", midnight - timedelta(minutes=5), datetime(2026, 11, 30, 10, 15, tzinfo=UTC))
    fresh = [("orders", *recurring), *(("orders", *s) for s in slices), ("products", "initial", None, None)]
    assert [(r["owner"], r["type"], r["mode"], r["window_start"], r["window_end"]) for r in rows(admin, schema)][
        before:
    ] == [
        *(("initech", "orders", *s) for s in slices[2:]),  # only the older slices it lacks, then the new type
        ("initech", "products", "initial", None, None),
        *(("globex", *job) for job in fresh),
        *(("acme", *job) for job in fresh),
    ]


def test_plan_one_owner_now(ops, admin, schema, clock):
    operations = ops(products(), owner_source=owners("acme", "globex"))
    assert operations.plan("shops", owner="globex", now=clock.now).owners == 1
    assert [r["owner"] for r in rows(admin, schema)] == ["globex"]
    with pytest.raises(UnknownOwnerError, match="owner 'initech' is not listed"):
        operations.plan("shops", owner="initech", now=clock.now)


def test_plan_one_owner_takes_its_lane_from_the_owner_source(ops, admin, schema, clock):
    operations = ops(products(), owner_source=owners(Owner("acme-us", lane="acme")))
    operations.plan("shops", owner=Owner("acme-us"), now=clock.now)  # the source's lane, not a lane of its own
    operations.plan("shops", owner=Owner("acme-uk", lane="acme"), now=clock.now)  # not listed yet: its lane named
    assert {(r["owner"], r["lane"]) for r in rows(admin, schema)} == {("acme-us", "acme"), ("acme-uk", "acme")}
    with pytest.raises(UnknownOwnerError, match="owner 'acme-ca' is not listed"):
        operations.plan("shops", owner=Owner("acme-ca"), now=clock.now)
    with pytest.raises(DeclarationError, match="owner 'acme-us' is in lane 'acme' according to the owner source"):
        operations.plan("shops", owner=Owner("acme-us", lane="elsewhere"), now=clock.now)


def test_waiting_jobs_follow_their_owner_into_a_new_lane_and_a_running_one_stays(
    ops, admin, schema, clock, database_url
):
    lanes = {"acme-us": "acme-us", "acme-eu": "acme"}
    operations = ops(orders(), owner_source=lambda queue: [Owner(o, lane=lane) for o, lane in lanes.items()])
    operations.plan("shops", now=clock.now)
    database = operations.session.database
    with (
        WorkerSlot(operations.synclane, database, "shops", clock=clock) as one,
        WorkerSlot(operations.synclane, database, "shops", clock=clock) as other,
    ):
        assert {one.take().lane, other.take().lane} == {"acme-us", "acme"}  # one job of each owner runs

        lanes["acme-us"] = "acme"  # acme-us now shares acme's rate limit
        summary = operations.plan("shops", now=clock.now)

        assert summary.moved == 2 and summary.total == 0
        moved = rows(admin, schema, "owner = 'acme-us'")
        assert {(r["status"], r["lane"]) for r in moved} == {("running", "acme-us"), ("pending", "acme")}
        assert operations.plan("shops", now=clock.now).moved == 0


def test_owner_source_returning_garbage_is_refused(ops, clock):
    with pytest.raises(OwnerSourceError, match="returned 42; expected an Owner or a string"):
        ops(products(), owner_source=owners("acme", 42)).plan("shops", now=clock.now)


def test_types_are_planned_with_their_declared_priority(ops, admin, schema, clock):
    ops(products(), orders()).plan("shops", now=clock.now)
    assert {(r["type"], r["priority"]) for r in rows(admin, schema)} == {("products", 0), ("orders", 1)}


def test_eight_racing_planners_create_every_job_exactly_once(ops, admin, schema, clock):
    source = owners(*[f"owner-{i}" for i in range(40)])
    planners = [ops(orders(horizon=365 * DAY), products(), owner_source=source) for _ in range(8)]

    totals = race(lambda planner=planner: planner.plan("shops", now=clock.now).total for planner in planners)

    expected = 40 * (13 + 1 + 1)  # 13 slices of 30 days (365 days), today's recurring job, the snapshot
    assert sum(totals) == expected
    counted = admin.execute(
        f'SELECT count(*) AS n, count(DISTINCT (owner, type, dedup_key)) AS distinct_keys FROM "{schema}".jobs'
    ).fetchone()
    assert counted == {"n": expected, "distinct_keys": expected}


def test_a_deleted_job_is_not_planned_again_until_its_coverage_row_is_deleted_too(ops, admin, schema, clock):
    """Coverage lives on its own row (so that retention can delete jobs); forgetting a window takes both."""
    operations = ops(orders())
    operations.plan("shops", now=clock.now)
    execute(admin, schema, "DELETE FROM {jobs} WHERE mode = 'recurring'")
    assert operations.plan("shops", now=clock.now).inserted == {"orders": 0}
    execute(admin, schema, "DELETE FROM {coverage}")
    assert operations.plan("shops", now=clock.now).inserted == {"orders": 1}
    assert operations.plan("shops", now=clock.now).inserted == {"orders": 0}


def test_planning_waits_out_a_passing_error_of_the_owner_source_and_not_a_bug(ops, admin, schema, clock):
    failures: list[Exception] = [
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.OperationalError("Connection refused"),
    ]

    def accounts(queue):
        if failures:
            raise failures.pop(0)
        return ["acme"]

    assert ops(products(), owner_source=accounts).plan("shops", now=clock.now).total == 1
    assert failures == []

    failures[:] = [psycopg.errors.TooManyConnections("sorry, too many clients already")] * 100
    started = time.monotonic()
    with pytest.raises(psycopg.errors.TooManyConnections):
        ops(products(), owner_source=accounts).plan("shops", now=clock.now, give_up_after=timedelta(seconds=1))
    assert time.monotonic() - started < 3  # bounded

    failures[:] = [psycopg.errors.UndefinedTable("relation accounts does not exist")]
    with pytest.raises(psycopg.errors.UndefinedTable):  # what the statement is, not a passing error: at once
        ops(products(), owner_source=accounts).plan("shops", now=clock.now)


def sent(operations, action):
    """The statements ``action`` sent, by name."""
    traffic = operations.session.database.traffic.snapshot()
    action()
    return dict((operations.session.database.traffic - traffic).statements)


def test_a_repeated_plan_compares_every_owner_once_then_reads_only_what_is_short(ops, clock):
    lanes = {"acme": "acme", "globex": "globex"}
    operations = ops(
        orders(), products(), owner_source=lambda queue: [Owner(o, lane=lane) for o, lane in lanes.items()]
    )
    operations.plan("shops", now=clock.now)

    # The run after a first plan compares each owner with its coverage rows, finds all settled, records it.
    assert sent(operations, lambda: operations.plan("shops", now=clock.now)) == {
        "try_planning_lock": 1,
        "owners_in_trouble": 1,  # one look per run at whose period is stretched (an index of the few)
        "planned_rosters": 1,
        "read_coverage": 1,
        "record_rosters": 1,
        "planning_unlock": 1,
    }
    # From then on, while the source lists the same owners in the same lanes: one read of what is short.
    for _ in range(2):
        assert sent(operations, lambda: operations.plan("shops", now=clock.now)) == {
            "try_planning_lock": 1,
            "owners_in_trouble": 1,
            "planned_rosters": 1,
            "read_short_coverage": 1,
            "planning_unlock": 1,
        }


def settled(operations, clock):
    """Plan until the planner has recorded every owner as settled (the first plan, then one comparing run)."""
    operations.plan("shops", now=clock.now)
    operations.plan("shops", now=clock.now)
    assert "read_coverage" not in sent(operations, lambda: operations.plan("shops", now=clock.now))


def test_a_source_that_lists_the_same_owners_in_another_order_each_time_is_still_found_settled(ops, clock):
    names = [f"owner-{number}" for number in range(30)]
    calls = []

    def source(queue):
        calls.append(queue)
        return [Owner(name) for name in (names if len(calls) % 2 else reversed(names))]

    operations = ops(orders(), owner_source=source)
    settled(operations, clock)
    assert "read_coverage" not in sent(operations, lambda: operations.plan("shops", now=clock.now))


def test_once_settled_each_new_period_and_a_raised_horizon_are_still_planned_from_the_short_read(
    ops, admin, schema, clock
):
    listed = [Owner(f"owner-{number}") for number in range(20)]
    operations = ops(orders(), owner_source=lambda queue: listed)
    settled(operations, clock)
    operations = ops(orders(), products(), owner_source=lambda queue: listed)  # a type declared since
    assert operations.plan("shops", now=clock.now).inserted == {"orders": 0, "products": 20}
    settled(operations, clock)

    later, period_end = clock.now + timedelta(minutes=15), datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    assert "read_coverage" not in sent(operations, lambda: operations.plan("shops", now=later))
    assert len(rows(admin, schema, "mode = 'recurring' AND window_end = %s", [period_end])) == 20
    assert operations.plan("shops", now=later).total == 0

    wider = ops(orders(horizon=timedelta(days=90)), products(), owner_source=lambda queue: listed)
    assert wider.plan("shops", now=later).inserted == {"orders": 20, "products": 0}  # one older slice each
    for owner in listed:
        assert_no_gap(windows(admin, schema, owner.id), datetime(2026, 9, 1, tzinfo=UTC), period_end)


def test_once_settled_an_owner_who_connects_moves_or_is_forgotten_is_compared_again(ops, admin, schema, clock):
    listed = {f"owner-{number}": Owner(f"owner-{number}") for number in range(40)}
    operations = ops(orders(), products(), owner_source=lambda queue: list(listed.values()))
    settled(operations, clock)

    listed["newcomer"] = Owner("newcomer")
    assert operations.plan("shops", now=clock.now).inserted == {"orders": 3, "products": 1}
    assert len(rows(admin, schema, "owner = 'newcomer'")) == 4

    listed["owner-7"] = Owner("owner-7", lane="shared")
    assert operations.plan("shops", now=clock.now).moved == 4  # two slices, the recurring window, the snapshot
    assert {r["lane"] for r in rows(admin, schema, "owner = 'owner-7'")} == {"shared"}

    del listed["owner-9"]  # disconnected: its coverage ages, and it gets nothing more
    later = clock.now + timedelta(minutes=15)
    assert operations.plan("shops", now=later).inserted == {"orders": 40, "products": 0}
    assert len(rows(admin, schema, "owner = 'owner-9'")) == 4

    execute(admin, schema, "DELETE FROM {jobs} WHERE owner = 'owner-3'")
    execute(admin, schema, "DELETE FROM {coverage} WHERE owner = 'owner-3'")  # the hand-made way to forget
    assert operations.plan("shops", now=later).inserted == {"orders": 3, "products": 1}
    for _ in range(2):
        assert operations.plan("shops", now=later).total == 0
    assert "read_coverage" not in sent(operations, lambda: operations.plan("shops", now=later))


def test_a_paused_owner_never_planned_keeps_its_bucket_compared_until_it_is_planned(ops, admin, schema, clock):
    listed = {"acme": Owner("acme")}
    operations = ops(orders(), owner_source=lambda queue: list(listed.values()))
    settled(operations, clock)
    listed["globex"] = Owner("globex")
    operations.pause("shops", "globex", "not paying")

    for _ in range(3):
        assert operations.plan("shops", now=clock.now).total == 0
        assert rows(admin, schema, "owner = 'globex'") == []
    assert "read_coverage" in sent(operations, lambda: operations.plan("shops", now=clock.now))

    operations.store.resume_owner("shops", "globex", now=clock.now)  # resumed without the resume's own plan
    assert operations.plan("shops", now=clock.now).inserted == {"orders": 3}


def test_an_owner_the_source_moves_to_another_lane_has_its_jobs_moved_once_and_is_then_left_alone(
    ops, clock, admin, schema
):
    lanes = {"acme": "acme", "globex": "globex"}
    operations = ops(
        orders(), products(), owner_source=lambda queue: [Owner(o, lane=lane) for o, lane in lanes.items()]
    )
    operations.plan("shops", now=clock.now)
    lanes["globex"] = "acme"

    assert operations.plan("shops", now=clock.now).moved == 4  # two slices, the recurring window, the snapshot
    assert {r["lane"] for r in rows(admin, schema, "owner = 'globex'")} == {"acme"}
    traffic = operations.session.database.traffic.snapshot()
    assert operations.plan("shops", now=clock.now).moved == 0
    assert "move_lanes" not in (operations.session.database.traffic - traffic).statements


def test_a_planning_run_that_starts_while_another_runs_does_nothing_and_says_so(ops, clock, schema, database_url):
    running, late = ops(orders()), ops(orders())
    running.plan("shops", owner="acme", now=clock.now)  # the table exists; a one-owner plan takes no lock
    assert running.store.try_planning_lock("shops")  # a run in progress, as far as the lock can tell
    try:
        summary = late.plan("shops", now=clock.now + DAY)
        assert summary.skipped and summary.total == 0 and summary.owners == 0
    finally:
        running.store.planning_unlock("shops")
    assert late.plan("shops", now=clock.now + DAY).total > 0


def test_the_planning_lock_is_per_queue_a_run_of_one_queue_never_makes_anothers_skip(schema, database_url, clock):
    """shops and books share a table: a planning run of shops still running holds shops' lock alone."""
    two = SyncLane(
        queues=[
            Queue("shops", owners=owners("acme"), types=[orders()]),
            Queue("books", owners=owners("acme"), types=[products()]),
        ],
        schema=schema,
    )
    with Operations(two, two.database(database_url)) as running, Operations(two, two.database(database_url)) as other:
        running.plan("books", owner="acme", now=clock.now)  # the table exists; a one-owner plan takes no lock
        assert running.store.try_planning_lock("shops")  # a run of shops in progress
        try:
            books = other.plan("books", now=clock.now + DAY)
            assert not books.skipped and books.owners == 1
            assert other.plan("shops", now=clock.now).skipped
        finally:
            running.store.planning_unlock("shops")
        assert not other.plan("shops", now=clock.now).skipped


def test_a_run_longer_than_its_interval_holds_the_lock_to_its_end_and_lets_go_when_it_fails(ops, clock):
    inside, go_on = threading.Event(), threading.Event()
    outcome: list[Exception] = []

    def slow_source(queue):  # a run still reading its owners when the next one starts
        inside.set()
        assert go_on.wait(60)
        if outcome:
            raise outcome.pop()
        return ["acme"]

    running, late = ops(orders(), owner_source=slow_source), ops(orders())
    first = Background(lambda: running.plan("shops", now=clock.now), name="overrunning plan")
    assert inside.wait(60)
    assert late.plan("shops", now=clock.now).skipped  # while the first run is still in its owner source
    go_on.set()
    assert first.result().total == 3
    again = late.plan("shops", now=clock.now)
    assert not again.skipped and again.total == 0  # the lock was let go at the end, and nothing was left

    inside.clear()
    outcome.append(ValueError("the owner source broke"))
    with pytest.raises(ValueError, match="the owner source broke"):
        running.plan("shops", now=clock.now + DAY)
    after = late.plan("shops", now=clock.now + DAY)
    assert not after.skipped and after.total > 0  # a run that failed let go of the lock too


def test_an_owner_with_its_own_period_is_planned_at_it_beside_owners_at_the_types(ops, admin, schema, clock):
    """orders every 15 minutes; premium every minute. A minute later only premium gets a window, from where its
    coverage ended; when its period goes to an hour, nothing is planned for it until the hour has passed its
    coverage, and then one window follows on from it."""
    minute, overlap = timedelta(minutes=1), timedelta(seconds=30)
    listed = {"premium": Owner("premium", every={"orders": minute}), "plain": Owner("plain")}
    operations = ops(orders(overlap=overlap), owner_source=lambda queue: list(listed.values()))
    operations.plan("shops", now=clock.now)  # 10:20
    recurring = "type = 'orders' AND mode = 'recurring' AND owner = %s"
    at = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
    assert [r["window_end"] for r in rows(admin, schema, recurring, ["premium"])] == [at]
    assert [r["window_end"] for r in rows(admin, schema, recurring, ["plain"])] == [at - 5 * minute]

    assert operations.plan("shops", now=clock.now + minute).inserted == {"orders": 1}
    [newest] = rows(admin, schema, recurring + " AND window_end > %s", ["premium", at])
    assert (newest["window_start"], newest["window_end"]) == (at - overlap, at + minute)

    listed["premium"] = Owner("premium", every={"orders": timedelta(hours=1)})
    assert operations.plan("shops", now=clock.now + 30 * minute).inserted == {"orders": 1}  # plain's 10:45
    assert len(rows(admin, schema, recurring, ["premium"])) == 2
    operations.plan("shops", now=clock.now + 40 * minute)  # 11:00
    windows = sorted((r["window_start"], r["window_end"]) for r in rows(admin, schema, recurring, ["premium"]))
    assert windows[-1] == (at + minute - overlap, at + 40 * minute)


def test_once_settled_an_owner_with_a_shorter_period_of_its_own_is_planned_at_it_from_the_short_read(
    ops, admin, schema, clock
):
    minute = timedelta(minutes=1)
    listed = [Owner("premium", every={"orders": minute}), Owner("plain")]
    operations = ops(orders(overlap=timedelta(seconds=30)), owner_source=lambda queue: listed)
    settled(operations, clock)  # 10:20

    statements = sent(operations, lambda: operations.plan("shops", now=clock.now + minute))  # plain's period: 10:15
    assert "read_coverage" not in statements
    recurring = "type = 'orders' AND mode = 'recurring' AND owner = %s"
    assert max(r["window_end"] for r in rows(admin, schema, recurring, ["premium"])) == clock.now + minute
    assert len(rows(admin, schema, recurring, ["plain"])) == 1


def test_an_owners_own_period_the_queue_cannot_plan_is_refused_naming_it(ops, clock):
    minute = timedelta(minutes=1)
    with pytest.raises(OwnerSourceError, match=r"every of owner 'acme': queue 'shops' has no job type 'order'"):
        ops(orders(), owner_source=owners(Owner("acme", every={"order": minute}))).plan("shops", now=clock.now)
    with pytest.raises(
        OwnerSourceError, match=r"for job type 'orders' \(1 min\) must be longer than the type's overlap"
    ):
        ops(orders(overlap=minute), owner_source=owners(Owner("acme", every={"orders": minute}))).plan(
            "shops", now=clock.now
        )
    with pytest.raises(OwnerSourceError, match=r"must be shorter than max_lag of queue 'shops' \(2 h\)"):
        ops(orders(), owner_source=owners(Owner("acme", every={"orders": 2 * DAY})), max_lag=timedelta(hours=2)).plan(
            "shops", now=clock.now
        )
    with pytest.raises(DeclarationError, match=r"every of owner 'new': queue 'shops' has no job type 'order'"):
        ops(orders()).plan("shops", now=clock.now, owner=Owner("new", lane="new", every={"order": minute}))
