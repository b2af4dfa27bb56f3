"""Planner properties under random horizons, slices, periods, overlaps and sequences of ``now``.

Two levels: the pure rule (``planning.plan_type`` over an in-memory table that
behaves like ``INSERT … ON CONFLICT DO NOTHING``) with many examples, and the
real planner against the real table (``Operations.plan(now=…)``) with fewer.
Runs are derandomized and keep no example database, so CI sees the same cases
every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from synclane_provider.core import Operations, Owner, OwnerStretch, Queue, SnapshotType, SyncLane, WindowedType
from synclane_provider.core.plan.rule import Coverage, PlannedJob, instant_key, midnight, period_start, plan_type
from synclane_provider.core.states import JobMode
from tests.support.helpers import owners, paged, rows

UTC = timezone.utc
DAY = timedelta(days=1)

PURE = settings(max_examples=100, derandomize=True, database=None, deadline=None)
AGAINST_POSTGRES = settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --- strategies ---------------------------------------------------------------------------------------------


def seconds(low: int, high: int):
    return st.integers(low, high).map(lambda s: timedelta(seconds=s))


@st.composite
def windowed_settings(draw) -> dict:
    """A valid windowed declaration of at most 40 slices; durations are often not whole seconds."""
    horizon = draw(
        st.one_of(
            seconds(60, 3 * 86400),
            seconds(86400, 800 * 86400),
            st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=3)),
        )
    )
    slice_ = max(timedelta(microseconds=1), horizon / draw(st.integers(1, 40)))
    every = draw(
        st.one_of(
            st.sampled_from([timedelta(minutes=1), timedelta(minutes=15), timedelta(hours=1), DAY, 2 * DAY]),
            seconds(1, 3 * 86400),
            st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(hours=3)),
        )
    )
    overlap = draw(st.one_of(st.just(timedelta(0)), st.timedeltas(min_value=timedelta(0), max_value=every / 2)))
    return {"horizon": horizon, "slice": slice_, "every": every, "overlap": overlap}


instants = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC))

advances = st.one_of(
    st.just(timedelta(0)),
    seconds(0, 3600),
    seconds(0, 10 * 86400),  # the planner was down for days
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2)),  # sub-second instants too
)


@dataclass(frozen=True)
class Step:
    advance: timedelta
    redeclared: dict | None  # new settings (horizon raised or lowered, other slices or periods), or unchanged


steps = st.lists(
    st.builds(Step, advances, st.one_of(st.none(), st.none(), windowed_settings())), min_size=1, max_size=8
)


def nows(first: datetime, plan: list[Step]) -> list[datetime]:
    out, now = [first], first
    for step in plan[1:]:
        now += step.advance
        out.append(now)
    return out


# --- what must hold, whoever planned ------------------------------------------------------------------------


def assert_covered(windows: list[tuple[str, datetime, datetime]], start: datetime, end: datetime) -> None:
    """History starts exactly at ``start``; the union of all windows reaches ``end`` with no hole;
    history slices never overlap one another (each instant of history is fetched once)."""
    initial = sorted((s, e) for mode, s, e in windows if mode == "initial")
    assert initial, "no history was planned"
    assert initial[0][0] == start, f"history starts at {initial[0][0]}, not at the horizon {start}"
    for (_, earlier_end), (later_start, _) in zip(initial, initial[1:]):
        assert later_start >= earlier_end, f"history slices overlap at {later_start} < {earlier_end}"
    reach = start
    for window_start, window_end in sorted((s, e) for _, s, e in windows):
        assert window_start <= reach, f"gap from {reach} to {window_start}"
        reach = max(reach, window_end)
    assert reach >= end, f"coverage stops at {reach}, before {end}"


def expected_span(first: datetime, plan: list[Step], initial: dict) -> tuple[datetime, datetime]:
    """Where coverage must start (the furthest horizon ever planned) and end (the latest period, or the first midnight)."""
    current, starts, ends = initial, [], [midnight(first)]
    for now, step in zip(nows(first, plan), plan):
        current = step.redeclared or current
        starts.append(midnight(now) - current["horizon"])
        ends.append(period_start(now, current["every"]))
    return min(starts), max(ends)


# --- the pure rule over an in-memory table ------------------------------------------------------------------


@dataclass
class Table:
    """Rows of one owner and type, keyed like the unique index; inserts of an existing key do nothing."""

    rows: dict[str, tuple[PlannedJob, datetime]] = field(default_factory=dict)

    def coverage(self) -> Coverage:
        if not self.rows:
            return Coverage()
        initial = [job for job, _ in self.rows.values() if job.mode is JobMode.INITIAL]
        ends = [job.window_end for job, _ in self.rows.values() if job.window_end is not None]
        starts = [job.window_start for job in initial if job.window_start is not None]
        return Coverage(
            has_initial=bool(initial),
            initial_start=min(starts, default=None),
            covered_until=max(ends, default=None),
            first_created_at=min(created for _, created in self.rows.values()),
        )

    def insert(self, planned: list[PlannedJob], now: datetime) -> list[PlannedJob]:
        inserted = []
        for job in planned:
            existing = self.rows.get(job.dedup_key)
            if existing is not None:
                # A key planned again must mean the same job: a different window under an existing key would be
                # dropped by ON CONFLICT DO NOTHING and leave a hole.
                assert existing[0] == job, f"key {job.dedup_key} planned as {job}, but exists as {existing[0]}"
                continue
            self.rows[job.dedup_key] = (job, now)
            inserted.append(job)
        return inserted


def windowed(settings_: dict) -> WindowedType:
    return WindowedType("orders", paged(0), **settings_)


@PURE
@given(first=instants, initial=windowed_settings(), plan=steps)
def test_windowed_plans_cover_the_horizon_to_the_latest_period_without_gaps_or_duplicates(first, initial, plan):
    table = Table()
    current = initial
    for now, step in zip(nows(first, plan), plan):
        current = step.redeclared or current
        job_type = windowed(current)
        before = table.coverage()
        inserted = table.insert(plan_type(job_type, before, now), now)

        recurring = [job for job in inserted if job.mode is JobMode.RECURRING]
        assert len(recurring) <= 1, "one recurring job per plan covers all the time since the last one"
        if recurring:
            [job] = recurring
            covered = before.covered_until if before.has_initial else midnight(now)
            assert job.window_start == covered - current["overlap"], "the recurring window starts where coverage ends"
            assert job.window_end == period_start(now, current["every"])
        for job in inserted:
            if job.mode is JobMode.INITIAL:
                assert job.window_end - job.window_start <= current["slice"]
        after = table.coverage()
        assert after.covered_until >= period_start(now, current["every"]), "coverage reaches the current period"
        assert table.insert(plan_type(job_type, after, now), now) == [], "planning again at once inserts nothing"

    windows = [(job.mode.value, job.window_start, job.window_end) for job, _ in table.rows.values()]
    assert_covered(windows, *expected_span(first, plan, initial))


@PURE
@given(
    first=instants,
    every=st.one_of(seconds(1, 3 * 86400), st.timedeltas(min_value=timedelta(microseconds=1), max_value=DAY)),
    plan=steps,
)
def test_a_snapshot_gets_one_first_load_and_at_most_one_refresh_per_period(first, every, plan):
    table = Table()
    job_type = SnapshotType("products", paged(0), every=every)
    refreshes = []
    for now in nows(first, plan):
        inserted = table.insert(plan_type(job_type, table.coverage(), now), now)
        refreshes += [job for job in inserted if job.mode is JobMode.RECURRING]
        assert table.insert(plan_type(job_type, table.coverage(), now), now) == []
        period = period_start(now, every)
        if period > first:
            assert instant_key(JobMode.RECURRING, period) in table.rows, "the current period has its refresh"
    assert [job.dedup_key for job, _ in table.rows.values()].count("initial") == 1
    assert all(job.window_start is None and job.window_end is None for job, _ in table.rows.values())
    assert len({job.dedup_key for job in refreshes}) == len(refreshes)
    assert all(job.window_start is None for job in refreshes)
    assert instant_key(JobMode.RECURRING, period_start(first, every)) not in table.rows, (
        "no refresh for the period in which the first load was planned"
    )


# --- the real planner against the real table ----------------------------------------------------------------

OWNERS = [Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"), Owner('it\'s; "quoted" ünïcode')]


def declaration(schema: str, current: dict) -> SyncLane:
    return SyncLane(
        queues=[
            Queue(
                "shops",
                owners=owners(*OWNERS),
                types=[SnapshotType("products", paged(0), every=current["every"]), windowed(current)],
            )
        ],
        schema=schema,
    )


@contextmanager
def redeclared(database_url: str, schema: str, admin, initial: dict) -> Iterator[Callable[[dict], Operations]]:
    """Operations on one emptied table declared differently over time: one per declaration met, closed after."""
    made: dict[tuple, Operations] = {}
    database = declaration(schema, initial).database(database_url)

    def operations(current: dict) -> Operations:
        key = tuple(sorted(current.items()))
        if key not in made:
            made[key] = Operations(declaration(schema, current), database)
        return made[key]

    operations(initial).activity("shops")  # creates the table on first use
    admin.execute(sql.SQL("TRUNCATE {0}.jobs, {0}.coverage").format(sql.Identifier(schema)))
    try:
        yield operations
    finally:
        for ops in made.values():
            ops.close()


@AGAINST_POSTGRES
@given(first=instants, initial=windowed_settings(), plan=steps)
def test_the_planner_against_the_table_covers_every_owner_and_replanning_inserts_nothing(
    database_url, schema, admin, first, initial, plan
):
    current = initial
    with redeclared(database_url, schema, admin, initial) as operations:
        for now, step in zip(nows(first, plan), plan):
            current = step.redeclared or current
            operations(current).plan("shops", now=now)
            assert operations(current).plan("shops", now=now).total == 0, "planning again at once inserts nothing"

    start, end = expected_span(first, plan, initial)
    found = rows(admin, schema)
    for owner in OWNERS:
        mine = [r for r in found if r["owner"] == owner.id]
        assert {r["lane"] for r in mine} == {owner.lane_or_id}
        windows = [(r["mode"], r["window_start"], r["window_end"]) for r in mine if r["type"] == "orders"]
        assert_covered(windows, start, end)
        assert [r["dedup_key"] for r in mine if r["type"] == "products"].count("initial") == 1
    assert len(found) == len({(r["owner"], r["type"], r["dedup_key"]) for r in found})


# --- retention: pruning never makes the planner plan a window again ------------------------------------------


def _progress_and_freshness(ops: Operations) -> dict:
    return {owner.id: (ops.progress("shops", owner.id), ops.freshness("shops", owner.id)) for owner in OWNERS}


@AGAINST_POSTGRES
@given(first=instants, initial=windowed_settings(), plan=steps, prune_every=st.sampled_from([1, 2, 3]))
def test_plan_complete_prune_plan_again_never_plans_a_completed_window_again(
    database_url, schema, admin, first, initial, plan, prune_every
):
    """Every job is completed as soon as it is planned, and every ``prune_every`` steps everything completed is
    pruned (recurring and manual ones; initial ones are kept by design). No key is ever inserted twice -- a
    second insert of a key would be a completed job planned again -- coverage has no hole, and an owner's
    progress and freshness read the same before and after each prune."""
    current = initial
    ever: dict[tuple, tuple] = {}
    pruned = 0
    with redeclared(database_url, schema, admin, initial) as operations:
        for number, (now, step) in enumerate(zip(nows(first, plan), plan)):
            current = step.redeclared or current
            ops = operations(current)
            ops.plan("shops", now=now)
            for row in rows(admin, schema):
                key = (row["owner"], row["type"], row["dedup_key"])
                window = (row["mode"], row["window_start"], row["window_end"])
                if row["status"] == "pending":
                    assert key not in ever, f"{key} was completed, pruned and planned again as {window}"
                    ever[key] = window
            admin.execute(
                sql.SQL("UPDATE {}.jobs SET status = 'completed', completed_at = %s WHERE status = 'pending'").format(
                    sql.Identifier(schema)
                ),
                [now],
            )
            if number % prune_every == 0:
                before = _progress_and_freshness(ops)
                finished = sum(1 for r in rows(admin, schema) if r["mode"] != "initial" and r["status"] == "completed")
                result = ops.prune("shops", older_than=timedelta(microseconds=1), now=now + timedelta(seconds=1))
                assert result.deleted == finished, "every completed recurring job is pruned, initial ones are kept"
                pruned += result.deleted
                assert _progress_and_freshness(ops) == before, "progress and freshness survive pruning"
                assert ops.plan("shops", now=now).total == 0, "planning again right after a prune inserts nothing"

    start, end = expected_span(first, plan, initial)
    for owner in OWNERS:
        windows = [w for (o, t, _), w in ever.items() if o == owner.id and t == "orders"]
        assert_covered(windows, start, end)
        assert [k for (o, t, k) in ever if o == owner.id and t == "products"].count("initial") == 1


# --- an owner's own period, changed at any time --------------------------------------------------------------

periods = st.one_of(
    st.none(),  # the type's period
    st.sampled_from([timedelta(minutes=1), timedelta(minutes=5), timedelta(hours=1), DAY]),
    seconds(1, 2 * 86400),
    st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(hours=2)),
)
period_steps = st.lists(st.tuples(advances, periods), min_size=1, max_size=10)


def assert_recurring_chain(windows: list[tuple[datetime, datetime]], first_end: datetime, overlap: timedelta) -> None:
    """Recurring windows, oldest first, each starting where the one before ended minus the overlap: no instant
    between them is left out, and none is fetched twice beyond the overlap."""
    reach = first_end
    for window_start, window_end in sorted(windows, key=lambda w: w[1]):
        assert window_start == reach - overlap, f"window {window_start}..{window_end} does not follow {reach}"
        assert window_end > reach, f"window {window_start}..{window_end} ends inside what was covered"
        reach = window_end


@PURE
@given(first=instants, declared=windowed_settings(), plan=period_steps)
def test_an_owners_own_period_changing_at_any_time_leaves_no_gap_and_plans_no_window_twice(first, declared, plan):
    job_type = windowed(declared)
    table = Table()
    now, reach = first, None
    plan = [(timedelta(0), plan[0][1]), *plan[1:]]  # the first plan is at ``first``
    for advance, every in plan:
        now += advance
        if every is not None and every <= job_type.overlap:
            every = None  # refused at declaration: the owner keeps the type's period
        planned = plan_type(job_type, table.coverage(), now, every)
        table.insert(planned, now)
        wanted = period_start(now, every or job_type.every)
        reach = wanted if reach is None else max(reach, wanted)
        assert table.coverage().covered_until >= wanted, "coverage reaches the owner's current period"
        assert table.insert(plan_type(job_type, table.coverage(), now, every), now) == []
    recurring = [(job.window_start, job.window_end) for job, _ in table.rows.values() if job.mode is JobMode.RECURRING]
    assert_recurring_chain(recurring, midnight(first), job_type.overlap)
    assert max([midnight(first)] + [end for _, end in recurring]) == max(reach, midnight(first)), (
        "coverage ends at the latest period any plan wanted, not beyond"
    )


def declaration_with_periods(schema: str, declared: dict, own: timedelta | None) -> SyncLane:
    every = {} if own is None else {"orders": own, "products": own}
    listed = [Owner("premium", every=every), Owner("plain")]
    return SyncLane(
        queues=[
            Queue(
                "shops",
                owners=owners(*listed),
                types=[SnapshotType("products", paged(0), every=declared["every"]), windowed(declared)],
            )
        ],
        schema=schema,
    )


@AGAINST_POSTGRES
@given(first=instants, declared=windowed_settings(), plan=period_steps)
def test_the_planner_follows_an_owners_own_period_as_it_changes_without_gaps_or_repeats(
    database_url, schema, admin, first, declared, plan
):
    database = declaration_with_periods(schema, declared, None).database(database_url)
    made: dict[timedelta | None, Operations] = {}
    with Operations(declaration_with_periods(schema, declared, None), database) as ops:
        ops.activity("shops")  # creates the table on first use
    admin.execute(sql.SQL("TRUNCATE {0}.jobs, {0}.coverage").format(sql.Identifier(schema)))
    now, reach, refreshes = first, {}, set()
    try:
        for advance, every in [(timedelta(0), plan[0][1]), *plan[1:]]:  # the first plan is at ``first``
            now += advance
            if every is not None and every <= declared["overlap"]:
                every = None
            if every not in made:
                made[every] = Operations(declaration_with_periods(schema, declared, every), database)
            made[every].plan("shops", now=now)
            assert made[every].plan("shops", now=now).total == 0, "planning again at once inserts nothing"
            for owner, period in (("premium", every or declared["every"]), ("plain", declared["every"])):
                reach[owner] = max(reach.get(owner, midnight(first)), period_start(now, period))
            refreshes.add(period_start(now, every or declared["every"]))
    finally:
        for ops in made.values():
            ops.close()

    found = rows(admin, schema)
    assert len(found) == len({(r["owner"], r["type"], r["dedup_key"]) for r in found})
    for owner in ("premium", "plain"):
        recurring = [
            (r["window_start"], r["window_end"])
            for r in found
            if r["owner"] == owner and r["type"] == "orders" and r["mode"] == "recurring"
        ]
        assert_recurring_chain(recurring, midnight(first), declared["overlap"])
        assert max([midnight(first)] + [end for _, end in recurring]) == max(reach[owner], midnight(first))
    premium_refreshes = [
        r for r in found if r["owner"] == "premium" and r["type"] == "products" and r["mode"] == "recurring"
    ]
    assert {r["dedup_key"] for r in premium_refreshes} <= {instant_key(JobMode.RECURRING, p) for p in refreshes}


# --- an owner in trouble: its period stretched while it fails, back at once when it heals -------------------

backoffs = st.builds(
    OwnerStretch, degraded_after=st.integers(1, 4), failing_after=st.integers(4, 8), max_stretch=st.integers(1, 32)
)
outcomes = st.lists(
    st.tuples(advances, st.one_of(st.integers(1, 6), st.just(0))),  # that many failed attempts, or a completion
    min_size=1,
    max_size=12,
)


@PURE
@given(first=instants, declared=windowed_settings(), backoff=backoffs, plan=outcomes)
def test_an_owner_backed_off_through_any_failures_and_recoveries_misses_no_window_and_gets_none_twice(
    first, declared, backoff, plan
):
    job_type = windowed(declared)
    table = Table()
    now, failures, reach = first, 0, midnight(first)
    for number, (advance, failed) in enumerate(plan):
        now += advance if number else timedelta(0)
        failures = failures + failed if failed else 0
        stretch = backoff.stretch(backoff.health(failures), failures)
        assert stretch == 1 or failures >= backoff.degraded_after
        every = job_type.every * stretch
        table.insert(plan_type(job_type, table.coverage(), now, every), now)
        reach = max(reach, period_start(now, every))
        covered = table.coverage().covered_until
        assert covered >= period_start(now, every), "coverage reaches the stretched period"
        if not failed:
            assert covered >= period_start(now, job_type.every), "a healed owner is caught up at once"
    recurring = [(job.window_start, job.window_end) for job, _ in table.rows.values() if job.mode is JobMode.RECURRING]
    assert_recurring_chain(recurring, midnight(first), job_type.overlap)
    assert max([midnight(first)] + [end for _, end in recurring]) == reach


@AGAINST_POSTGRES
@given(first=instants, declared=windowed_settings(), backoff=backoffs, plan=outcomes)
def test_the_planner_backs_off_an_owner_through_any_failures_and_recoveries_without_gaps_or_repeats(
    database_url, schema, admin, first, declared, backoff, plan
):
    """The owner's row says how many attempts failed in a row (as the finish writes it); the real planner
    stretches its period from it. Its recurring windows still follow one another; its lane-mate is untouched."""
    listed = [Owner("trouble", lane="shared"), Owner("mate", lane="shared")]
    declaration = SyncLane(
        queues=[Queue("shops", owners=owners(*listed), types=[windowed(declared)], owner_stretch=backoff)],
        schema=schema,
    )
    every = declared["every"]
    reach = {"trouble": midnight(first), "mate": midnight(first)}
    now, failures = first, 0
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.activity("shops")
        admin.execute(sql.SQL("TRUNCATE {0}.jobs, {0}.coverage, {0}.owners").format(sql.Identifier(schema)))
        for number, (advance, failed) in enumerate(plan):
            now += advance if number else timedelta(0)
            failures = failures + failed if failed else 0
            health = backoff.health(failures)
            admin.execute(
                sql.SQL(
                    "INSERT INTO {}.owners (queue, owner, health, consecutive_failures) VALUES ('shops', 'trouble', "
                    "%s, %s) ON CONFLICT (queue, owner) DO UPDATE SET health = excluded.health, "
                    "consecutive_failures = excluded.consecutive_failures"
                ).format(sql.Identifier(schema)),
                [health.value, failures],
            )
            ops.plan("shops", now=now)
            assert ops.plan("shops", now=now).total == 0, "planning again at once inserts nothing"
            stretched = every * backoff.stretch(health, failures)
            reach["trouble"] = max(reach["trouble"], period_start(now, stretched))
            reach["mate"] = max(reach["mate"], period_start(now, every))

    found = rows(admin, schema)
    assert len(found) == len({(r["owner"], r["dedup_key"]) for r in found})
    for owner in ("trouble", "mate"):
        recurring = [
            (r["window_start"], r["window_end"]) for r in found if r["owner"] == owner and r["mode"] == "recurring"
        ]
        assert_recurring_chain(recurring, midnight(first), declared["overlap"])
        assert max([midnight(first)] + [end for _, end in recurring]) == reach[owner]
        assert {r["lane"] for r in found if r["owner"] == owner} == {"shared"}
