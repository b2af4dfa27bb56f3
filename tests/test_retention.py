"""Retention: what a prune deletes and keeps, in bounded batches that wait on no one, and the declaration."""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import DeclarationError, Operations, Queue
from synclane_provider.core.ops.monitor import Monitor
from tests.support.helpers import declare, execute, orders, owners, products, rows

DAY = timedelta(days=1)


def finish_all(admin, schema, when) -> None:
    execute(admin, schema, "UPDATE {jobs} SET status = 'completed', completed_at = %s WHERE status = 'pending'", [when])


@pytest.mark.parametrize(
    ("retention", "complaint"),
    [
        (30, r"must be a timedelta \(e.g. timedelta\(days=30\)\) or None"),
        ("30d", "must be a timedelta"),
        (timedelta(0), "must be positive"),
        (-DAY, "must be positive"),
        (timedelta(minutes=5), "must be at least 1 h, got 5 min"),
    ],
)
def test_a_bad_retention_is_refused_when_declared(retention, complaint):
    with pytest.raises(DeclarationError, match=complaint) as caught:
        Queue("shops", owners=owners("acme"), types=[products()], retention=retention)
    assert "of queue 'shops'" in str(caught.value)


def test_prune_without_a_retention_says_how_to_declare_one(schema, database_url):
    declaration = declare(schema, products())
    with Operations(declaration, declaration.database(database_url)) as ops:
        with pytest.raises(DeclarationError, match=r"declares no retention.*retention=timedelta\(days=30\)"):
            ops.prune("shops")


def test_prune_deletes_old_completed_and_cancelled_jobs_and_keeps_what_waits_for_a_person(
    schema, database_url, admin, clock
):
    declaration = declare(schema, orders(), products(), owner_source=owners("acme", "globex"), retention=30 * DAY)
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now)
        finish_all(admin, schema, clock.now)
        progress = {owner: ops.progress("shops", owner) for owner in ("acme", "globex")}
        assert ops.freshness("shops", "acme") == {"orders": clock.now, "products": clock.now}
        # Later jobs of every kind, 40 days later: one of each state that must stay, one cancelled, one manual.
        clock.advance(40 * DAY)
        ops.plan("shops", now=clock.now)
        ops.enqueue("shops", "acme", "products", key="by-hand", now=clock.now)
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET status = 'completed', completed_at = %s WHERE mode = 'manual'",
            [clock.now - 31 * DAY],
        )
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET status = 'failed' WHERE owner = 'globex' AND status = 'pending' AND type = 'orders'",
        )
        ops.cancel("shops", "acme", "disconnected", type="orders", now=clock.now)
        before = rows(admin, schema)
        old = {r["id"] for r in before if r["mode"] != "initial" and r["status"] == "completed"}
        assert len(old) == 2 + 1  # each owner's first recurring orders job, and the manual job
        freshness = ops.freshness("shops", "acme")
        assert freshness["products"] == clock.now - 40 * DAY  # the planned snapshot's: a hand job is not freshness

        pruned = ops.prune("shops", now=clock.now)

        left = rows(admin, schema)
        assert (pruned.deleted, pruned.more) == (3, False)
        assert {r["id"] for r in left} == {r["id"] for r in before} - old
        assert {r["status"] for r in left if r["mode"] != "initial"} == {"pending", "failed", "abandoned"}
        assert len([r for r in left if r["mode"] == "initial"]) == len([r for r in before if r["mode"] == "initial"])
        assert {owner: ops.progress("shops", owner) for owner in ("acme", "globex")} == progress
        assert ops.freshness("shops", "acme") == freshness, "the newest completion survives its job"
        assert ops.plan("shops", now=clock.now).total == 0, "nothing pruned is planned again"

        # The cancelled job goes 30 days after its cancel, not after its creation.
        [cancelled] = [r for r in left if (r["error"] or "").startswith("Cancelled: ")]
        assert ops.prune("shops", now=cancelled["heartbeat_at"] + 29 * DAY).deleted == 0
        assert ops.prune("shops", now=cancelled["heartbeat_at"] + 31 * DAY).deleted >= 1
        assert cancelled["id"] not in {r["id"] for r in rows(admin, schema)}
        failed = [r for r in rows(admin, schema) if r["status"] == "failed"]
        assert failed, "failed jobs stay however old"


def test_prune_runs_in_bounded_batches_and_says_when_more_is_left(schema, database_url, admin, clock):
    declaration = declare(
        schema, products(every=timedelta(hours=1)), owner_source=owners(*[f"o{i}" for i in range(5)]), retention=DAY
    )
    with Operations(declaration, declaration.database(database_url)) as ops:
        for hour in range(4):
            ops.plan("shops", now=clock.now + hour * timedelta(hours=1))
            finish_all(admin, schema, clock.now + hour * timedelta(hours=1))
        recurring = sum(1 for r in rows(admin, schema) if r["mode"] == "recurring")
        assert recurring == 15
        later = clock.now + 10 * DAY
        first = ops.prune("shops", now=later, batch=4, max_batches=2)
        assert (first.deleted, first.batches, first.more) == (8, 2, True)
        second = ops.prune("shops", now=later, batch=4)
        assert (second.deleted, second.more) == (7, False)
        assert ops.prune("shops", now=later).deleted == 0


def test_prune_skips_a_locked_job_instead_of_waiting(schema, database_url, admin, clock):
    declaration = declare(
        schema, products(every=timedelta(hours=1)), owner_source=owners("acme", "globex"), retention=DAY
    )
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now)
        clock.advance(timedelta(hours=1))
        ops.plan("shops", now=clock.now)
        finish_all(admin, schema, clock.now)
        with psycopg.connect(database_url) as holder:  # a transaction holding one completed job's row
            [locked] = holder.execute(
                sql.SQL("SELECT id FROM {}.jobs WHERE mode = 'recurring' AND owner = 'acme' FOR UPDATE").format(
                    sql.Identifier(schema)
                )
            ).fetchone() or [None]
            started = time.monotonic()
            assert ops.prune("shops", now=clock.now + 2 * DAY).deleted == 1
            assert time.monotonic() - started < 2
        assert locked in {r["id"] for r in rows(admin, schema)}
        assert ops.prune("shops", now=clock.now + 2 * DAY).deleted == 1


def test_jobs_without_a_coverage_row_are_not_pruned_until_the_planner_has_read_them(schema, database_url, admin, clock):
    declaration = declare(schema, products(every=timedelta(hours=1)), owner_source=owners("acme"), retention=DAY)
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now)
        clock.advance(timedelta(hours=1))
        ops.plan("shops", now=clock.now)
        finish_all(admin, schema, clock.now)
        execute(admin, schema, "DELETE FROM {coverage}")  # as if the jobs had been inserted by hand
        assert ops.prune("shops", now=clock.now + 2 * DAY).deleted == 0
        assert ops.plan("shops", now=clock.now).total == 0  # the planner reads the jobs into a coverage row
        assert ops.prune("shops", now=clock.now + 2 * DAY).deleted == 1
        assert ops.plan("shops", now=clock.now).total == 0


def test_an_owner_behind_less_than_max_lag_stays_healthy_after_a_prune_shorter_than_max_lag(
    schema, database_url, admin, clock
):
    """The health check, the max_freshness_lag gauge and the owners view read how far the pruned windows reached,
    not the initial slices a one-day retention leaves behind."""
    declaration = declare(
        schema,
        orders(every=timedelta(hours=6)),
        owner_source=owners("acme"),
        retention=DAY,
        max_lag=2 * DAY,
    )
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        for _ in range(40):  # ten days of recurring windows, each completed as it is planned
            ops.plan("shops")
            finish_all(admin, schema, clock.now)
            clock.advance(timedelta(hours=6))
        newest = max(r["window_end"] for r in rows(admin, schema))
        clock.advance(1.5 * DAY - timedelta(hours=6))  # then the owner stalls: a day and a half behind

        def lag_as_read():
            report = ops.check_health("shops", abandoned_since=clock.now)
            [owner] = Monitor(ops).owners("shops").items
            return report.healthy, ops.gauges("shops").max_freshness_lag, owner.lag

        assert lag_as_read() == (True, clock.now - newest, clock.now - newest)
        assert ops.prune("shops").deleted > 0
        assert {r["mode"] for r in rows(admin, schema, "status = 'completed'")} == {"initial"}
        assert lag_as_read() == (True, clock.now - newest, clock.now - newest)

        ops.plan("shops")  # the stalled owner's next windows, then cancelled and pruned in their turn
        assert ops.cancel("shops", "acme", "disconnected").abandoned > 0
        clock.advance(DAY + timedelta(minutes=1))
        assert ops.prune("shops").deleted > 0
        assert ops.gauges("shops").max_freshness_lag == clock.now - newest


def test_freshness_survives_a_later_prune_of_cancelled_jobs_of_the_same_owner_and_type(
    schema, database_url, admin, clock
):
    declaration = declare(schema, products(every=timedelta(hours=1)), owner_source=owners("acme"), retention=DAY)
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        finish_all(admin, schema, clock.now)  # the initial snapshot, an hour before the newest completion
        clock.advance(timedelta(hours=1))
        ops.plan("shops")
        finish_all(admin, schema, clock.now)
        completed = clock.now
        clock.advance(2 * DAY)
        assert ops.prune("shops").deleted == 1  # the recurring snapshot; its completion stays on coverage
        assert ops.freshness("shops", "acme") == {"products": completed}
        ops.plan("shops")
        assert ops.cancel("shops", "acme", "disconnected").abandoned == 1
        clock.advance(2 * DAY)
        assert ops.prune("shops").deleted == 1  # the cancelled job, which never completed
        assert ops.freshness("shops", "acme") == {"products": completed}


def test_a_cancelled_job_is_kept_retention_long_from_its_cancel_not_its_creation(schema, database_url, admin, clock):
    declaration = declare(schema, products(every=timedelta(hours=1)), owner_source=owners("acme"), retention=DAY)
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        clock.advance(timedelta(hours=1))
        ops.plan("shops")  # the recurring snapshot, created now
        clock.advance(3 * DAY)
        assert ops.cancel("shops", "acme", "disconnected").abandoned == 2  # created three days ago
        clock.advance(DAY - timedelta(minutes=1))
        assert ops.prune("shops").deleted == 0
        clock.advance(timedelta(minutes=2))
        assert ops.prune("shops").deleted == 1  # the initial one stays: initial jobs are never pruned


def test_an_abandoned_job_that_was_not_cancelled_is_never_pruned(schema, database_url, admin, clock):
    declaration = declare(schema, products(every=timedelta(hours=1)), owner_source=owners("acme"), retention=DAY)
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        clock.advance(timedelta(hours=1))
        ops.plan("shops")
        [recurring] = rows(admin, schema, "mode = 'recurring'")
        assert ops.abandon("shops", recurring["id"], "the account is gone for good")
        execute(admin, schema, "UPDATE {jobs} SET heartbeat_at = %s WHERE id = %s", [clock.now, recurring["id"]])
        clock.advance(365 * DAY)
        assert ops.prune("shops").deleted == 0
        assert [r["status"] for r in rows(admin, schema, "id = %s", [recurring["id"]])] == ["abandoned"]


@pytest.mark.parametrize("made_by", ["enqueue", "resync"])
def test_a_prune_never_takes_a_hand_made_or_re_sync_window_for_the_owners_reach(
    schema, database_url, admin, clock, made_by
):
    """An owner that stalled stays lagging after a prune: a window enqueued by hand, or re-synced, may end later
    than anything the plan reached (even in the future), and retention records only planned windows as the reach
    that lag is read from once their jobs are gone."""
    declaration = declare(
        schema, orders(every=timedelta(hours=6)), owner_source=owners("acme"), retention=DAY, max_lag=2 * DAY
    )
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        finish_all(admin, schema, clock.now)
        reach = max(r["window_end"] for r in rows(admin, schema))
        clock.advance(3 * DAY)  # then the owner stalls
        if made_by == "enqueue":
            ops.enqueue("shops", "acme", "orders", window_start=clock.now - DAY, window_end=clock.now + DAY, key="k")
        else:
            ops.resync("shops", "orders", clock.now - DAY, clock.now + DAY, reason="again", key="k")
        finish_all(admin, schema, clock.now)
        assert ops.gauges("shops").max_freshness_lag == clock.now - reach

        clock.advance(2 * DAY)
        assert ops.prune("shops").deleted >= 2  # the hand-made or re-sync job(s), and the planned recurring window
        assert rows(admin, schema, "mode = 'manual'") == []
        assert ops.gauges("shops").max_freshness_lag == clock.now - reach
        assert [f.owner for f in ops.check_health("shops", abandoned_since=clock.now).findings] == ["acme"]
