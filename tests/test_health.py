"""The health check: abandoned since the last check, stuck workers, lagging owners; and the queue gauges."""

from __future__ import annotations

from datetime import timedelta

import pytest

from synclane_provider.core import DeclarationError, JobAbandoned, Operations, Owner, Queue, WorkerSlot
from synclane_provider.core.ops.health import MAX_FINDINGS, Problem
from tests.support.helpers import declare, execute, orders, owners, paged, products, rows

SOURCE = ["acme", "globex", "initech"]


def revoked_for_globex(job):
    """Access revoked for one account: its jobs end abandoned at once; the others' pages go through."""
    if job.owner == "globex":
        raise JobAbandoned("access revoked by the account owner")
    return paged(120)(job)


@pytest.fixture
def listed():
    return list(SOURCE)


@pytest.fixture
def lane(schema, listed):
    return declare(
        schema,
        orders(revoked_for_globex),
        products(paged(30)),
        owner_source=lambda queue: listed,
        max_lag=timedelta(hours=1),
    )


@pytest.fixture
def ops(lane, database_url, clock):
    with Operations(lane, lane.database(database_url), clock=clock) as operations:
        yield operations


def run_everything(lane, database_url, clock) -> None:
    with WorkerSlot(lane, lane.database(database_url), "shops", clock=clock) as slot:
        slot.drain()


def test_all_is_well_when_everything_completed_recently(schema, database_url, clock):
    healthy = declare(
        schema, orders(paged(120)), products(paged(30)), owner_source=owners(*SOURCE), max_lag=timedelta(hours=1)
    )
    with Operations(healthy, healthy.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        run_everything(healthy, database_url, clock)
        report = ops.check_health("shops", abandoned_since=clock.now - timedelta(minutes=5))
    assert report.healthy and report.findings == ()
    assert report.describe() == "queue shops: healthy"


def test_a_job_abandoned_since_the_last_check_is_reported_with_its_owner_job_and_error(ops, lane, database_url, clock):
    ops.plan("shops")
    run_everything(lane, database_url, clock)  # globex's order jobs are abandoned now
    report = ops.check_health("shops", abandoned_since=clock.now - timedelta(minutes=1))
    assert not report.healthy
    assert {f.problem for f in report.findings} == {Problem.ABANDONED}
    assert {f.owner for f in report.findings} == {"globex"}
    first = report.findings[0]
    job = ops.job(first.job_id)
    assert first.message == (
        f"abandoned: owner globex, job {job.describe()}, at cursor None after 1 attempt(s): "
        "JobAbandoned: access revoked by the account owner"
    )
    assert report.describe().splitlines()[0] == f"queue shops: {len(report.findings)} problem(s)"
    assert f"- {first.message}" in report.describe().splitlines()


def test_each_abandonment_is_reported_by_one_check_only(ops, lane, database_url, clock):
    ops.plan("shops")
    run_everything(lane, database_url, clock)
    # The check whose range holds the abandonment reports it; the previous and the next one do not.
    assert ops.check_health(
        "shops", abandoned_since=clock.now - timedelta(minutes=1), abandoned_until=clock.now
    ).healthy
    assert not ops.check_health(
        "shops", abandoned_since=clock.now, abandoned_until=clock.now + timedelta(minutes=1)
    ).healthy
    clock.advance(timedelta(minutes=1))
    assert ops.check_health("shops", abandoned_since=clock.now).healthy
    # With no start (a check run by hand), every abandoned job is reported.
    assert len(ops.check_health("shops", abandoned_since=None).findings) == len(
        ops.list_jobs("shops", status="abandoned")
    )


def test_a_cancel_and_an_operators_abandon_are_abandonments_at_their_own_time(ops, admin, schema, clock):
    ops.plan("shops")
    clock.advance(timedelta(hours=2))
    ops.cancel("shops", "initech", "account disconnected")
    [job] = ops.list_jobs("shops", owner="acme", type="products")
    ops.abandon("shops", job.id, "the account is on hold")
    abandoned = rows(admin, schema, "status = 'abandoned'")
    assert abandoned and {row["next_run_at"] for row in abandoned} == {clock.now}
    messages = [f.message for f in ops.check_health("shops", abandoned_since=clock.now).findings]
    assert any("owner initech" in m and "Cancelled: account disconnected" in m for m in messages)
    assert any(f"#{job.id}," in m and "Abandoned: the account is on hold" in m for m in messages)


def test_a_running_job_whose_heartbeat_is_older_than_its_lease_is_a_stuck_worker(ops, lane, database_url, clock):
    ops.plan("shops")
    with WorkerSlot(lane, lane.database(database_url), "shops", clock=clock) as slot:
        taken = slot.take()
        clock.advance(lane.queue("shops").lease - timedelta(seconds=1))
        assert ops.check_health("shops", abandoned_since=clock.now).healthy  # still within its lease
        clock.advance(timedelta(seconds=2))
        [finding] = ops.check_health("shops", abandoned_since=clock.now).findings
    assert (finding.problem, finding.owner, finding.job_id) == (Problem.STUCK, taken.owner, taken.id)
    assert finding.message.startswith(
        f"stuck: owner {taken.owner}, job {taken.describe()}, running on {slot.worker_id}"
    )
    assert "longer ago than its lease (5 min): the worker hangs or is gone" in finding.message


def test_an_owner_whose_newest_completed_window_is_older_than_max_lag_is_lagging(
    ops, lane, database_url, clock, listed
):
    ops.plan("shops")
    run_everything(lane, database_url, clock)
    since = clock.advance(timedelta(minutes=50))  # the newest windows end at 10:15; now 11:10, 55 min behind
    assert ops.check_health("shops", abandoned_since=since).healthy
    clock.advance(timedelta(minutes=10))
    findings = ops.check_health("shops", abandoned_since=since).findings
    # globex completed no window at all (still on its first load, as far as freshness goes): no lag to measure.
    assert [(f.problem, f.owner) for f in findings] == [(Problem.LAGGING, "acme"), (Problem.LAGGING, "initech")]
    assert findings[0].message == (
        "lagging: owner acme is 1 h 5 min behind in orders (newest completed window ends 2026-11-30 10:15 UTC), "
        "more than max_lag (1 h)"
    )
    listed.remove("initech")  # disconnected: no longer the check's business
    assert [f.owner for f in ops.check_health("shops", abandoned_since=since).findings] == ["acme"]


def test_a_queue_without_max_lag_is_never_lagging(schema, database_url, clock):
    relaxed = declare(schema, orders(paged(120)), owner_source=owners("acme"))
    with Operations(relaxed, relaxed.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        run_everything(relaxed, database_url, clock)
        clock.advance(timedelta(days=30))
        assert ops.check_health("shops", abandoned_since=clock.now).healthy


def test_a_flood_of_findings_is_cut_to_a_readable_message(ops, admin, schema, clock):
    ops.plan("shops")
    execute(admin, schema, "UPDATE {jobs} SET status = 'abandoned', error = 'E: broken', next_run_at = %s", [clock.now])
    execute(
        admin,
        schema,
        "INSERT INTO {jobs} (queue, owner, lane, type, mode, status, dedup_key, error, next_run_at) "
        "SELECT 'shops', 'acme', 'acme', 'products', 'manual', 'abandoned', 'manual:' || n, 'E: broken', %s "
        "FROM generate_series(1, %s) AS n",
        [clock.now, MAX_FINDINGS],
    )
    report = ops.check_health("shops", abandoned_since=clock.now)
    assert len(report.findings) == MAX_FINDINGS
    assert report.describe().splitlines()[-1] == f"- … and more abandoned beyond the first {MAX_FINDINGS}"


def test_the_gauges_count_waiting_running_abandoned_and_the_largest_lag(ops, lane, database_url, clock):
    ops.plan("shops")
    before = ops.gauges("shops")
    assert (before.waiting, before.running, before.abandoned, before.max_freshness_lag) == (
        len(ops.list_jobs("shops")),
        0,
        0,
        None,
    )
    run_everything(lane, database_url, clock)
    clock.advance(timedelta(minutes=50))
    after = ops.gauges("shops")
    abandoned = len(ops.list_jobs("shops", status="abandoned"))
    assert (after.waiting, after.running, after.abandoned) == (0, 0, abandoned) and abandoned > 0
    assert after.max_freshness_lag == timedelta(minutes=55)


@pytest.mark.parametrize(
    ("max_lag", "message"),
    [
        (timedelta(0), "max_lag of queue 'shops' must be positive, got 0 s"),
        ("1h", "max_lag of queue 'shops' must be a timedelta, got '1h'"),
        (
            timedelta(minutes=15),
            "max_lag of queue 'shops' (15 min) must be longer than the period of job type 'orders' (15 min)",
        ),
    ],
)
def test_a_bad_max_lag_fails_when_declared_naming_the_value(schema, max_lag, message):
    with pytest.raises(DeclarationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        declare(schema, orders(), max_lag=max_lag)


def test_max_lag_needs_a_windowed_type_to_measure():
    with pytest.raises(DeclarationError, match="has nothing to measure: the queue declares no windowed type"):
        Queue("shops", owners=owners("acme"), types=[products()], max_lag=timedelta(hours=1))


def test_an_owner_given_as_owner_with_a_lane_is_checked_by_its_id(schema, database_url, clock):
    shared = declare(
        schema, orders(paged(10)), owner_source=owners(Owner("acme-us", lane="acme")), max_lag=timedelta(hours=1)
    )
    with Operations(shared, shared.database(database_url), clock=clock) as ops:
        ops.plan("shops")
        run_everything(shared, database_url, clock)
        clock.advance(timedelta(hours=2))
        assert [f.owner for f in ops.check_health("shops", abandoned_since=clock.now).findings] == ["acme-us"]


def test_a_hand_job_does_not_make_an_owner_fresh(ops, lane, database_url, clock):
    """Freshness follows the plan, as coverage does: a hand job's window (which may even end in the future)
    neither hides nor causes a lag."""
    ops.plan("shops")
    run_everything(lane, database_url, clock)
    since = clock.advance(timedelta(hours=2))
    ops.enqueue(
        "shops",
        "acme",
        "orders",
        window_start=clock.now - timedelta(hours=1),
        window_end=clock.now + timedelta(days=1),
        key="backfill",
    )
    run_everything(lane, database_url, clock)
    assert "acme" in [f.owner for f in ops.check_health("shops", abandoned_since=since).findings]
