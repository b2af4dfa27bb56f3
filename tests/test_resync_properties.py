"""A re-sync's windows lie within the history slices the planner cut, and a re-sync is invisible to the planner:
any sequence of re-syncs leaves every later plan as it would have been.

For the windows, the planning rule itself cuts an owner's history at a random first plan, and the re-sync of a
random range is checked against those slices. For the planner, two queues declared alike share one table; re-syncs of random types, ranges and owners go to the first only.
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
    JobMode,
    Operations,
    Owner,
    PinnedClock,
    Queue,
    SnapshotType,
    SyncLane,
    WindowedType,
    WorkerSlot,
)
from synclane_provider.core.plan.resync import resync_windows
from synclane_provider.core.plan.rule import history_of, plan_type
from synclane_provider.core.records import Coverage
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

HOUR = timedelta(hours=1)


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(
    slice_hours=st.integers(1, 40 * 24),
    more_hours=st.integers(0, 60 * 24),  # the horizon: the slice and this
    first_plan=st.integers(0, 7 * 24 * 60).map(lambda m: START + timedelta(minutes=m)),
    start_hours=st.integers(-120 * 24, 10 * 24),
    length_hours=st.integers(1, 120 * 24),
    exact=st.integers(0, 10_000),
)
def test_a_re_syncs_windows_cover_its_range_and_lie_each_within_one_of_the_owners_history_slices(
    slice_hours, more_hours, first_plan, start_hours, length_hours, exact
):
    orders = WindowedType(
        "orders",
        paged(0),
        horizon=(slice_hours + more_hours) * HOUR,
        slice=slice_hours * HOUR,
        every=timedelta(minutes=30),
    )
    cut = [
        (j.window_start, j.window_end) for j in plan_type(orders, Coverage(), first_plan) if j.mode is JobMode.INITIAL
    ]
    history = history_of(Coverage(True, min(a for a, _ in cut), first_created_at=first_plan))
    start = first_plan + start_hours * HOUR
    end = start + length_hours * HOUR

    windows = resync_windows(orders, start, end, history)
    assert windows[0][1] == end and windows[-1][0] == start
    assert all(newer[0] == older[1] for newer, older in zip(windows, windows[1:]))  # no gap, no overlap
    assert all(a < b <= a + orders.slice for a, b in windows)
    for a, b in windows:
        met = [(s, e) for s, e in cut if s < b and a < e]
        assert len(met) <= 1 and all(s <= a and b <= e for s, e in met), ((a, b), met)
    one = cut[exact % len(cut)]
    assert resync_windows(orders, *one, history) == (one,)  # one history slice again: exactly that window


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
