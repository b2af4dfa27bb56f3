"""A re-sync is invisible to the planner: any sequence of re-syncs leaves every later plan as it would have been.

Two queues declared alike share one table; re-syncs of random types, ranges and owners go to the first only.
After each step (time moves on, maybe a re-sync, a plan of both, every due job run) the two queues must agree
on everything the planner and the operators read: the planned jobs and their states, the coverage rows, what
each plan inserted, freshness, lag and initial-load progress.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from synclane_provider.core import (
    Operations,
    Owner,
    PinnedClock,
    Queue,
    SnapshotType,
    SyncLane,
    WindowedType,
    WorkerSlot,
)
from tests.support.helpers import owners, paged

UTC = timezone.utc
START = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
OWNERS = ("acme", "globex", "initech")

AGAINST_POSTGRES = settings(
    max_examples=12,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

resyncs = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["orders", "products"]),
        st.integers(-20 * 24, 2 * 24).map(lambda h: timedelta(hours=h)),  # start, from the step's now
        st.integers(1, 6 * 24).map(lambda h: timedelta(hours=h)),  # length
        st.one_of(st.none(), st.lists(st.sampled_from(OWNERS), min_size=1, max_size=3, unique=True)),
    ),
)
steps = st.lists(
    st.tuples(st.sampled_from([timedelta(0), timedelta(minutes=7), timedelta(hours=5), timedelta(days=2)]), resyncs),
    min_size=1,
    max_size=5,
)


def declared(schema: str) -> SyncLane:
    def types() -> list:
        return [
            SnapshotType("products", paged(0), every=timedelta(hours=6)),
            WindowedType(
                "orders",
                paged(0),
                horizon=timedelta(days=5),
                slice=timedelta(days=2),
                every=timedelta(minutes=30),
                overlap=timedelta(minutes=5),
            ),
        ]

    source = owners("acme", Owner("globex", lane="shared"), Owner("initech", lane="shared"))
    return SyncLane(
        queues=[Queue("a", owners=source, types=types()), Queue("b", owners=source, types=types())], schema=schema
    )


def seen(ops: Operations, admin, schema: str, queue: str) -> dict:
    """Everything the planner and an operator read of ``queue``, but its re-sync requests' own jobs."""
    jobs = admin.execute(
        sql.SQL(
            "SELECT owner, lane, type, mode, status, window_start, window_end, dedup_key, priority FROM {}.jobs"
            " WHERE queue = %s AND request_key IS NULL ORDER BY owner, type, dedup_key"
        ).format(sql.Identifier(schema)),
        [queue],
    ).fetchall()
    coverage = admin.execute(
        sql.SQL(
            "SELECT owner, type, has_initial, initial_start, covered_until, first_created_at, last_created_at, lane,"
            " lane_width, last_pruned_completion, last_pruned_reach FROM {}.coverage WHERE queue = %s"
            " ORDER BY owner, type"
        ).format(sql.Identifier(schema)),
        [queue],
    ).fetchall()
    return {
        "jobs": jobs,
        "coverage": coverage,
        "freshness": [ops.freshness(queue, owner) for owner in OWNERS],
        "progress": [ops.progress(queue, owner).total for owner in OWNERS],
        "completed": [ops.progress(queue, owner).completed for owner in OWNERS],
        "lags": ops.store.window_lags(queue, list(OWNERS), ["orders"], over=None, now=ops.at(None), limit=100),
    }


@AGAINST_POSTGRES
@given(steps=steps)
def test_any_sequence_of_re_syncs_leaves_every_later_plan_as_without_them(steps, schema, database_url, admin):
    declaration = declared(schema)
    clock = PinnedClock(START)
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.activity("a")  # the table
        admin.execute(sql.SQL("TRUNCATE {0}.jobs, {0}.coverage, {0}.resync_requests").format(sql.Identifier(schema)))
        made = 0
        for advance, resync in steps:
            clock.advance(advance)
            if resync is not None:
                type, offset, length, chosen = resync
                start = clock.now + offset
                made += ops.resync("a", type, start, start + length, owners=chosen, reason="property").made
            plans = [ops.plan(queue).inserted for queue in ("a", "b")]
            assert plans[0] == plans[1]
            for queue in ("a", "b"):
                with WorkerSlot(declaration, declaration.database(database_url), queue, clock=clock) as slot:
                    slot.drain()
            assert seen(ops, admin, schema, "a") == seen(ops, admin, schema, "b")
        counted = admin.execute(
            sql.SQL("SELECT count(*) AS n FROM {}.jobs WHERE request_key IS NOT NULL AND status = 'completed'").format(
                sql.Identifier(schema)
            )
        ).fetchone()
        assert counted["n"] == made  # the re-syncs did run, beside the plan
