"""Re-syncing a range: one request, its jobs cut like history, idempotent per key, refused when it cannot be."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from synclane_provider.core import DeclarationError, JobAbandoned, Operations, Owner, UnknownOwnerError, WorkerSlot
from synclane_provider.core.errors import UnknownJobTypeError
from synclane_provider.core.ops.health import STUCK_AFTER_REQUEUES, Problem
from synclane_provider.core.plan.resync import resync_windows
from synclane_provider.core.records import OwnerState, ResyncWindows
from tests.support.helpers import declare, execute, orders, owners, paged, products, race, rows

UTC = timezone.utc
MARCH = datetime(2026, 3, 1, tzinfo=UTC)
APRIL = datetime(2026, 4, 1, tzinfo=UTC)


@pytest.fixture
def declaration(schema):
    return declare(
        schema,
        products(paged(0)),
        orders(paged(0), slice=timedelta(days=10)),
        owner_source=owners("acme", Owner("globex", lane="shared"), Owner("initech", lane="shared")),
    )


@pytest.fixture
def ops(declaration, database_url):
    with Operations(declaration, declaration.database(database_url)) as operations:
        yield operations


def test_a_range_is_cut_on_slice_boundaries_from_midnight_newest_first_in_each_owners_lane(ops, admin, schema, clock):
    start, end = MARCH + timedelta(hours=6), APRIL + timedelta(hours=12)
    request = ops.resync("shops", "orders", start, end, owners=["acme", "globex"], reason="bad totals", now=clock.now)

    assert (request.made, request.jobs, request.owners, request.reason) == (10, 10, ("acme", "globex"), "bad totals")
    jobs = rows(admin, schema, order="owner, id")
    assert {(j["owner"], j["lane"]) for j in jobs} == {("acme", "acme"), ("globex", "shared")}
    acme = [(j["window_start"], j["window_end"]) for j in jobs if j["owner"] == "acme"]
    assert acme == [
        (APRIL, APRIL + timedelta(hours=12)),
        (APRIL - timedelta(days=10), APRIL),
        (APRIL - timedelta(days=20), APRIL - timedelta(days=10)),
        (APRIL - timedelta(days=30), APRIL - timedelta(days=20)),
        (start, APRIL - timedelta(days=30)),
    ]
    assert {(j["mode"], j["status"], j["request_key"]) for j in jobs} == {("manual", "pending", request.key)}


def test_windows_cover_exactly_the_range_without_gap_or_overlap():
    job_type = orders(slice=timedelta(hours=7))
    start, end = datetime(2026, 3, 2, 5, 13, tzinfo=UTC), datetime(2026, 3, 9, 17, 2, 1, tzinfo=UTC)
    windows = resync_windows(job_type, start, end)
    assert windows[0][1] == end and windows[-1][0] == start
    assert all(newer[0] == older[1] for newer, older in zip(windows, windows[1:]))
    assert all(a < b and b - a <= timedelta(hours=7) for a, b in windows)
    midnight = datetime(2026, 3, 9, tzinfo=UTC)
    assert {b for _, b in windows[1:]} <= {midnight + n * timedelta(hours=7) for n in range(-30, 4)}


def windows_of(admin, schema, owner: str) -> list[tuple[datetime, datetime]]:
    return [(j["window_start"], j["window_end"]) for j in rows(admin, schema, "owner = %s", [owner], order="id")]


def day(month: int, day: int) -> datetime:
    return datetime(2026, month, day, tzinfo=UTC)


def test_a_month_of_an_owner_with_history_is_cut_on_its_history_slices_boundaries(ops, admin, schema, clock):
    """acme's first plan (2026-11-30) cut its history back from that midnight in 10-day slices: ..., [10-01, 10-11),
    [10-11, 10-21), [10-21, 10-31), [10-31, 11-10), ... October re-synced is one window per slice it meets, each
    inside one of them, not [10-22, 11-01) ... [10-01, 10-02) cut back from November's first midnight. Plans on
    later days moved acme's coverage on, not its history."""
    ops.plan("shops", owner="acme", now=clock.now)
    ops.plan("shops", owner="acme", now=clock.now + timedelta(days=3, hours=5))
    execute(admin, schema, "DELETE FROM {jobs}")  # the coverage stays: what the planner knows of acme's history
    ops.resync("shops", "orders", day(10, 1), day(11, 1), owners=["acme"], reason="October", now=clock.now)
    assert windows_of(admin, schema, "acme") == [
        (day(10, 31), day(11, 1)),
        (day(10, 21), day(10, 31)),
        (day(10, 11), day(10, 21)),
        (day(10, 1), day(10, 11)),
    ]


def test_history_slices_are_found_from_the_first_plans_midnight_when_the_oldest_one_is_clipped(
    schema, database_url, admin, clock
):
    """45 days of 30-day slices: [10-31, 11-30) and the clipped [10-16, 10-31). Re-syncing exactly one of them
    makes exactly that window; October is cut where the history is, and before it as an owner without history."""
    declaration = declare(schema, orders(paged(0), horizon=timedelta(days=45)), owner_source=owners("acme"))
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", owner="acme", now=clock.now)
        history = windows_of(admin, schema, "acme")[1:]  # after the recurring window
        assert history == [(day(10, 31), day(11, 30)), (day(10, 16), day(10, 31))]
        execute(admin, schema, "DELETE FROM {jobs}")
        for start, end in history:
            ops.resync("shops", "orders", start, end, reason="one slice", now=clock.now)
            assert windows_of(admin, schema, "acme") == [(start, end)]
            execute(admin, schema, "DELETE FROM {jobs}")
        ops.resync("shops", "orders", day(10, 1), day(11, 1), reason="October", now=clock.now)
        assert windows_of(admin, schema, "acme") == [
            (day(10, 31), day(11, 1)),
            (day(10, 16), day(10, 31)),
            (day(10, 1), day(10, 16)),
        ]


def test_a_dry_run_makes_nothing_and_names_each_owners_windows_which_the_request_then_makes(ops, admin, schema, clock):
    """acme has history, globex and initech have none: a dry run says which windows each would get, and the
    request asked for with its key makes exactly those."""
    ops.plan("shops", owner="acme", now=clock.now)
    planned = rows(admin, schema)
    preview = ops.resync("shops", "orders", day(10, 1), day(11, 1), reason="October", now=clock.now, dry_run=True)
    assert rows(admin, schema) == planned and ops.resyncs("shops") == []
    without_history = ((day(10, 22), day(11, 1)), (day(10, 12), day(10, 22)), (day(10, 2), day(10, 12)))
    assert preview.windows == (
        ResyncWindows(
            ("acme",),
            (
                (day(10, 31), day(11, 1)),
                (day(10, 21), day(10, 31)),
                (day(10, 11), day(10, 21)),
                (day(10, 1), day(10, 11)),
            ),
        ),
        ResyncWindows(("globex", "initech"), (*without_history, (day(10, 1), day(10, 2)))),
    )
    assert (preview.made, preview.jobs, preview.owners, preview.requested_at) == (0, 12, None, clock.now)

    made = ops.resync("shops", "orders", day(10, 1), day(11, 1), reason="October", key=preview.key, now=clock.now)
    assert (made.made, made.jobs, made.windows) == (12, 12, preview.windows)
    for group in preview.windows:
        for owner in group.owners:
            assert windows_of(admin, schema, owner)[-len(group.windows) :] == list(group.windows)
    again = ops.resync("shops", "orders", day(10, 1), day(11, 1), reason="October", key=preview.key, dry_run=True)
    assert (again.made, again.jobs, again.windows) == (0, 12, ())  # the key is used: nothing more would be made


def test_a_snapshot_types_dry_run_names_its_owners_with_no_windows(ops, admin, schema, clock):
    preview = ops.resync("shops", "products", MARCH, APRIL, owners=["initech", "acme"], reason="r", dry_run=True)
    assert (preview.windows, preview.jobs, rows(admin, schema)) == ((ResyncWindows(("initech", "acme"), ()),), 2, [])


def test_a_snapshot_type_gets_one_snapshot_job_per_owner(ops, admin, schema, clock):
    request = ops.resync("shops", "products", MARCH, APRIL, reason="catalog was wrong", now=clock.now)
    assert (request.made, request.owners) == (3, None)
    jobs = rows(admin, schema, order="owner")
    assert [(j["owner"], j["window_start"], j["dedup_key"]) for j in jobs] == [
        (owner, None, f"resync:{request.key}") for owner in ("acme", "globex", "initech")
    ]


def test_the_same_key_again_makes_nothing_and_without_a_key_each_call_is_its_own(ops, admin, schema, clock):
    first = ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", key="march-fix", now=clock.now)
    again = ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", key="march-fix", now=clock.now)
    assert (first.made, again.made, again.key, again.jobs) == (4, 0, "march-fix", 4)
    assert len(rows(admin, schema)) == 4

    one = ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", now=clock.now)
    other = ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", now=clock.now)
    assert one.key != other.key and (one.made, other.made) == (4, 4)
    assert len(rows(admin, schema)) == 12


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_key_used_for_another_range_is_refused_naming_both(ops, clock, dry_run):
    ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", key="k1", now=clock.now)
    with pytest.raises(DeclarationError, match=r"'k1'.*2026-03-01.*2026-03-02"):
        ops.resync(
            "shops", "orders", MARCH + timedelta(days=1), APRIL, owners=["acme"], reason="r", key="k1", dry_run=dry_run
        )


@pytest.mark.parametrize(
    ("first", "again", "used_for", "asked_for"),
    [
        (["acme"], ["globex"], "of owner(s) acme", "of owner(s) globex"),
        (["acme"], ["acme", "globex"], "of owner(s) acme", "of owner(s) acme, globex"),
        (["acme"], None, "of owner(s) acme", "of every owner"),
        (None, ["acme"], "of every owner", "of owner(s) acme"),
    ],
)
def test_a_key_used_for_other_owners_is_refused_naming_both(
    ops, admin, schema, clock, first, again, used_for, asked_for
):
    made = ops.resync("shops", "orders", MARCH, APRIL, owners=first, reason="r", key="k1", now=clock.now)
    before = rows(admin, schema)
    with pytest.raises(DeclarationError) as refused:
        ops.resync("shops", "orders", MARCH, APRIL, owners=again, reason="r", key="k1", now=clock.now)
    assert f"was used for orders [2026-03-01T00:00:00Z, 2026-04-01T00:00:00Z) {used_for};" in str(refused.value)
    assert f"this call asks for orders [2026-03-01T00:00:00Z, 2026-04-01T00:00:00Z) {asked_for}:" in str(refused.value)
    assert rows(admin, schema) == before and len(before) == made.jobs


def test_two_racing_calls_with_one_key_make_the_jobs_once(declaration, database_url, admin, schema, clock):
    def call():
        with Operations(declaration, declaration.database(database_url)) as mine:
            return mine.resync("shops", "orders", MARCH, APRIL, reason="race", key="same", now=clock.now)

    for _ in range(5):
        admin.execute(f'TRUNCATE "{schema}".jobs, "{schema}".resync_requests')
        results = race([call, call, call])
        assert sorted(r.made for r in results) == [0, 0, 12]
        assert len(rows(admin, schema)) == 12


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (dict(type="orders", owners=["gone"]), UnknownOwnerError, "'gone' is not listed"),
        (dict(type="refunds"), UnknownJobTypeError, "no job type 'refunds'"),
        (dict(type="orders", start=APRIL, end=MARCH), DeclarationError, r"start \(2026-04-01.*before its end"),
        (dict(type="orders", start=APRIL, end=APRIL), DeclarationError, "must be before"),
        (dict(type="orders", start=datetime(2026, 3, 1)), DeclarationError, "timezone-aware"),
        (dict(type="orders", reason=" "), DeclarationError, "reason must be a non-empty string"),
        (dict(type="orders", end=MARCH + timedelta(days=400_000)), DeclarationError, "more than 100000"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_what_cannot_be_re_synced_is_refused_naming_the_bad_value(ops, admin, schema, args, error, message, dry_run):
    call = dict(type="orders", start=MARCH, end=APRIL, reason="why", dry_run=dry_run)
    call.update(args)
    with pytest.raises(error, match=message):
        ops.resync("shops", call.pop("type"), call.pop("start"), call.pop("end"), **call)
    assert rows(admin, schema) == []


def test_every_due_planned_job_of_the_lane_goes_before_re_sync_work(declaration, database_url, ops, clock):
    earlier = clock.now - timedelta(hours=1)
    ops.resync("shops", "products", MARCH, APRIL, owners=["acme"], reason="r", now=earlier)
    ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", now=earlier)
    ops.plan("shops", owner="acme", now=clock.now)
    order = []
    with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
        while (result := slot.run_one(then_continue=False)) is not None and result.job.owner == "acme":
            order.append((result.job.request_key is not None, result.job.type))
    planned = [(False, "products")] + [(False, "orders")] * 7  # the first snapshot, the recurring window, 6 slices
    assert order == planned + [(True, "products")] + [(True, "orders")] * 4


def test_completed_re_sync_jobs_move_no_freshness_lag_or_progress(declaration, database_url, ops, admin, schema, clock):
    ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", now=clock.now)
    with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
        assert slot.drain().jobs == 4
    assert {j["status"] for j in rows(admin, schema)} == {"completed"}
    assert ops.freshness("shops", "acme") == {"orders": None, "products": None}
    assert ops.progress("shops", "acme").total == 0
    assert ops.store.window_lags("shops", ["acme"], ["orders"], over=None, now=clock.now, limit=10) == []
    execute(admin, schema, "INSERT INTO {coverage} (queue, owner, type) VALUES ('shops', 'acme', 'orders')")
    assert ops.prune("shops", older_than=timedelta(hours=1), now=clock.now + timedelta(days=1)).deleted == 4
    assert rows(admin, schema) == []
    assert ops.freshness("shops", "acme") == {"orders": None, "products": None}


def test_a_paused_owner_is_refused_by_name_and_left_out_of_a_request_of_every_owner(ops, admin, schema, clock):
    ops.store.upsert_owner(OwnerState("shops", "globex", paused_at=clock.now, paused_reason="token revoked"))
    for dry_run in (True, False):
        with pytest.raises(DeclarationError, match=r"'globex' \(token revoked\).*resume them first"):
            ops.resync("shops", "orders", MARCH, APRIL, owners=["acme", "globex"], reason="r", dry_run=dry_run)
    assert rows(admin, schema) == []
    preview = ops.resync("shops", "products", MARCH, APRIL, reason="r", dry_run=True)
    assert preview.windows == (ResyncWindows(("acme", "initech"), ()),)
    request = ops.resync("shops", "products", MARCH, APRIL, reason="r")
    assert {j["owner"] for j in rows(admin, schema)} == {"acme", "initech"} and request.jobs == 2


def test_a_queue_without_owners_to_re_sync_is_refused(schema, database_url):
    declaration = declare(schema, orders(), owner_source=owners())
    with Operations(declaration, declaration.database(database_url)) as empty:
        with pytest.raises(DeclarationError, match="lists none not paused"):
            empty.resync("shops", "orders", MARCH, APRIL, reason="r")


def test_requests_are_listed_with_their_progress_cancelled_whole_and_their_failures_requeued(
    declaration, database_url, ops, admin, schema, clock
):
    first = ops.resync(
        "shops", "orders", MARCH, APRIL, owners=["acme"], reason="totals", key="k1", by="ana", now=clock.now
    )
    second = ops.resync("shops", "orders", MARCH, APRIL, owners=["globex"], reason="again", key="k2", now=clock.now)
    with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
        slot.run_one(then_continue=False)  # acme's newest window: acme and globex are in separate lanes
    execute(admin, schema, "UPDATE {jobs} SET status = 'failed', error = 'boom' WHERE request_key = 'k1' AND id = 2")

    listed = {p.request.key: p for p in ops.resyncs("shops")}
    assert set(listed) == {first.key, second.key}
    one = listed["k1"]
    assert (one.total, one.done, one.pending, one.retrying, one.stopped, one.finished) == (4, 1, 2, 1, 0, False)
    assert (one.request.requested_by, one.request.reason) == ("ana", "totals")
    execute(admin, schema, "UPDATE {jobs} SET status = 'deferred' WHERE request_key = 'k1' AND id = 2")
    spent = ops.resyncs("shops", key="k1")[0]
    assert (spent.retrying, spent.stopped) == (0, 1)  # its attempts spent: now a failure of the request
    assert ops.requeue("shops", request="k1", now=clock.now) == 1
    assert ops.resyncs("shops", key="k1")[0].stopped == 0

    cancelled = ops.cancel("shops", request="k1", by="bob", now=clock.now)
    assert (cancelled.abandoned, cancelled.stopping) == (3, 0)
    after = ops.resyncs("shops", key="k1")[0]
    assert (after.done, after.stopped, after.request.cancelled_by, after.finished) == (1, 3, "bob", True)
    assert ops.requeue("shops", request="k1") == 0  # a cancelled request stays cancelled
    assert ops.resyncs("shops", key="k2")[0].pending == 4  # the other request untouched
    with pytest.raises(DeclarationError, match="no re-sync request 'nope'"):
        ops.cancel("shops", request="nope")


def test_what_a_run_landed_names_the_windows_each_request_fetched_again(declaration, database_url, ops, clock):
    ops.resync(
        "shops", "orders", MARCH, MARCH + timedelta(days=12), owners=["acme"], reason="r", key="m", now=clock.now
    )
    ops.plan("shops", owner="globex", now=clock.now)
    with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
        summary = slot.drain()
    extra = summary.arrivals.extra("shops", "orders")
    assert list(extra["owners"]) == ["globex"]  # where new data landed: the planned jobs alone
    assert extra["jobs"] == len(ops.list_jobs("shops", owner="globex", type="orders"))
    assert extra["resyncs"] == {
        "m": {
            "acme": [
                {"window_start": "2026-03-03T00:00:00+00:00", "window_end": "2026-03-13T00:00:00+00:00", "records": 0},
                {"window_start": "2026-03-01T00:00:00+00:00", "window_end": "2026-03-03T00:00:00+00:00", "records": 0},
            ]
        }
    }
    again = type(summary.arrivals).from_dict(summary.arrivals.as_dict())  # through XCom and a deferral
    assert again.extra("shops", "orders") == extra


def test_a_re_sync_window_abandoned_again_after_its_requeues_is_a_stuck_window(schema, database_url, clock):
    """A request's requeue counts on each window as any requeue does: a window abandoned again after
    STUCK_AFTER_REQUEUES of them is said to be stuck, not one more plain abandonment."""

    def revoked(job):
        raise JobAbandoned("access revoked")

    declaration = declare(schema, products(revoked), owner_source=owners("acme"))
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.resync("shops", "products", MARCH, APRIL, reason="r", key="k", now=clock.now)
        with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
            for _ in range(STUCK_AFTER_REQUEUES):
                assert slot.run_one(then_continue=False).outcome == "abandoned"
                assert ops.requeue("shops", request="k", now=clock.now) == 1
            assert slot.run_one(then_continue=False).outcome == "abandoned"
        report = ops.check_health("shops", abandoned_since=None)
    assert [finding.problem for finding in report.findings] == [Problem.STUCK_WINDOW]


def test_a_requests_requeue_with_force_lets_its_refused_snapshots_delete(ops, admin, schema, clock):
    ops.resync("shops", "products", MARCH, APRIL, owners=["acme", "globex"], reason="r", key="k", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET status = 'failed', error = 'refused' WHERE owner = 'acme'")
    assert ops.requeue("shops", request="k", force_deletions=True, now=clock.now) == 1
    assert {(j["owner"], j["force_deletions"], j["requeue_count"]) for j in rows(admin, schema)} == {
        ("acme", True, 1),
        ("globex", False, 0),
    }
    with pytest.raises(DeclarationError, match="no re-sync request 'nope'"):
        ops.requeue("shops", request="nope")


def test_cancelling_a_request_stops_its_failed_and_deferred_jobs_too_and_no_requeue_revives_them(
    ops, admin, schema, clock
):
    ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", key="k", now=clock.now)
    ops.plan("shops", owner="acme", now=clock.now)
    execute(admin, schema, "UPDATE {jobs} SET status = 'failed' WHERE request_key = 'k' AND id = 1")
    execute(admin, schema, "UPDATE {jobs} SET status = 'deferred' WHERE request_key = 'k' AND id = 2")
    cancelled = ops.cancel("shops", request="k", reason="wrong range", now=clock.now)
    assert (cancelled.abandoned, cancelled.stopping) == (4, 0)
    request_jobs = rows(admin, schema, "request_key = 'k'")
    assert {(j["status"], j["error"]) for j in request_jobs} == {("abandoned", "Cancelled: wrong range")}
    assert {j["status"] for j in rows(admin, schema, "request_key IS NULL")} == {"pending"}  # the plan untouched
    assert ops.requeue("shops", owner="acme", now=clock.now) == 0  # a cancelled request stays cancelled
    assert ops.requeue("shops", request="k", now=clock.now) == 0


@pytest.mark.parametrize("scope", [{}, {"owner": "acme", "request": "k"}])
def test_a_cancel_names_an_owner_or_a_request(ops, admin, schema, clock, scope):
    ops.resync("shops", "orders", MARCH, APRIL, owners=["acme"], reason="r", key="k", now=clock.now)
    with pytest.raises(DeclarationError, match="an owner or a re-sync request"):
        ops.cancel("shops", reason="why", **scope)
    assert {j["status"] for j in rows(admin, schema)} == {"pending"}
