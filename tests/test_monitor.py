"""The operator's read model: queues, lanes, owners and jobs as the Airflow page and the CLI show them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from synclane_provider.core import JobStatus, Operations, Owner, WorkerSlot
from synclane_provider.core.ops.monitor import Monitor, plain
from synclane_provider.core.records import OwnerState
from synclane_provider.core.states import OwnerHealth
from tests.support.helpers import declare, execute, orders, owners, products, rows


@pytest.fixture
def declaration(schema):
    return declare(schema, products(), orders(), owner_source=owners("acme", "globex", "initech"))


@pytest.fixture
def monitor(declaration, database_url, clock):
    with Operations(declaration, declaration.database(database_url), clock=clock) as operations:
        operations.plan("shops")
        yield Monitor(operations)


@pytest.fixture
def scene(monitor, admin, schema, clock):
    """acme is done; globex runs a slice at cursor 50 and has one abandoned; initech waits."""
    execute(
        admin,
        schema,
        "UPDATE {jobs} SET status = 'completed', processed_count = 10, completed_at = %s WHERE owner = 'acme'",
        [clock.now - timedelta(minutes=10)],
    )
    globex = [r["id"] for r in rows(admin, schema, "owner = 'globex' AND type = 'orders' AND mode = 'initial'")]
    execute(
        admin,
        schema,
        "UPDATE {jobs} SET status = 'abandoned', cursor = '50', error = 'ShopError: page 50 broken' WHERE id = %s",
        [globex[0]],
    )
    execute(
        admin,
        schema,
        "UPDATE {jobs} SET status = 'running', cursor = '75', processed_count = 75, "
        "leased_by = 'worker-1', lease_expires_at = %s, heartbeat_at = %s, started_at = %s "
        "WHERE id = %s",
        [
            clock.now + timedelta(minutes=4),
            clock.now - timedelta(seconds=30),
            clock.now - timedelta(minutes=2),
            globex[1],
        ],
    )
    return {"abandoned": globex[0], "running": globex[1]}


def test_a_queue_counts_its_jobs_by_status_and_its_last_hour(monitor, scene, admin, schema, clock):
    summary = monitor.queue("shops", now=clock.now)
    by_status = {s.value: len(rows(admin, schema, "status = %s", [s.value])) for s in JobStatus}
    assert summary.jobs == by_status
    assert (summary.abandoned, summary.jobs["running"]) == (1, 1)
    acme = rows(admin, schema, "owner = 'acme'")
    assert summary.done_last_hour == len(acme)
    assert summary.records_last_hour == 10 * len(acme)
    oldest_due = min(r["next_run_at"] for r in rows(admin, schema, "status = 'pending'"))
    assert summary.oldest_waiting_age == clock.now - oldest_due


def test_the_last_hour_leaves_out_what_completed_before_it(monitor, scene, admin, schema, clock):
    execute(
        admin, schema, "UPDATE {jobs} SET completed_at = %s WHERE owner = 'acme'", [clock.now - timedelta(minutes=61)]
    )
    summary = monitor.queue("shops", now=clock.now)
    assert (summary.done_last_hour, summary.records_last_hour) == (0, 0)


def test_a_lane_shows_its_running_job_with_cursor_worker_and_heartbeat_age(monitor, scene, admin, schema, clock):
    page = monitor.lanes("shops", now=clock.now)
    lanes = {lane.lane: lane for lane in page.items}
    assert list(lanes) == ["globex", "initech"]  # acme has nothing running or waiting
    [running] = lanes["globex"].running
    assert (running.id, running.cursor, running.records, running.worker) == (scene["running"], "75", 75, "worker-1")
    assert running.heartbeat_age == timedelta(seconds=30)
    assert lanes["globex"].waiting == len(rows(admin, schema, "owner = 'globex' AND status = 'pending'"))
    assert lanes["initech"].running == []
    assert lanes["initech"].next_due == min(r["next_run_at"] for r in rows(admin, schema, "owner = 'initech'"))


def test_a_wide_lane_shows_every_job_it_runs_in_slot_order(database_url, admin, schema, clock, monkeypatch):
    # Without indexes the rows come in the order they were written (slot 2 first): only the statement's own
    # ORDER BY puts them in slot order, as it must whatever plan the server picks.
    monkeypatch.setenv("PGOPTIONS", "-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off")
    wide = declare(
        schema,
        products(),
        orders(),
        owner_source=lambda queue: [Owner("acme-us", "acme", lane_width=3), Owner("acme-eu", "acme", lane_width=3)],
    )
    with Operations(wide, wide.database(database_url), clock=clock) as operations:
        operations.plan("shops")
        taken = [r["id"] for r in rows(admin, schema, "type = 'orders'")][:3]
        for slot, job_id in zip([2, 0, 1], taken):
            execute(
                admin,
                schema,
                "UPDATE {jobs} SET status = 'running', lane_slot = %s, leased_by = %s, lease_expires_at = %s "
                "WHERE id = %s",
                [slot, f"worker-{slot}", clock.now + timedelta(minutes=5), job_id],
            )
        [acme] = Monitor(operations).lanes("shops", now=clock.now).items
    assert [(job.slot, job.width, job.id) for job in acme.running] == [
        (0, 3, taken[1]),
        (1, 3, taken[2]),
        (2, 3, taken[0]),
    ]
    assert acme.waiting == len(rows(admin, schema, "status = 'pending'"))


def test_a_lane_names_the_latest_error_of_its_waiting_jobs(monitor, scene, admin, schema, clock):
    failed = rows(admin, schema, "owner = 'initech' AND type = 'products'")[0]["id"]
    execute(
        admin, schema, "UPDATE {jobs} SET status = 'failed', error = 'TimeoutError: shop slow' WHERE id = %s", [failed]
    )
    initech = monitor.lanes("shops", now=clock.now).items[-1]
    assert (initech.lane, initech.last_error, initech.error_job_id) == ("initech", "TimeoutError: shop slow", failed)


def test_lanes_come_a_page_at_a_time_in_name_order(monitor, scene, clock):
    first = monitor.lanes("shops", limit=1, now=clock.now)
    assert ([lane.lane for lane in first.items], first.next) == (["globex"], "globex")
    second = monitor.lanes("shops", after=first.next, limit=1, now=clock.now)
    assert [lane.lane for lane in second.items] == ["initech"]
    assert monitor.lanes("shops", after=second.next, limit=1, now=clock.now).items == []


def test_an_owner_shows_its_initial_load_freshness_and_trouble(monitor, scene, admin, schema, clock):
    owners_ = {o.owner: o for o in monitor.owners("shops", now=clock.now).items}
    assert list(owners_) == ["acme", "globex", "initech"]
    acme, globex, initech = owners_["acme"], owners_["globex"], owners_["initech"]
    acme_initial = rows(admin, schema, "owner = 'acme' AND mode = 'initial'")
    assert (acme.initial_completed, acme.initial_total, acme.initial_records) == (
        len(acme_initial),
        len(acme_initial),
        10 * len(acme_initial),
    )
    assert acme.initial_complete
    # freshness: the stalest type -- products (a snapshot) completed 10 minutes ago, orders up to its window end
    newest_orders = max(r["window_end"] for r in rows(admin, schema, "owner = 'acme' AND type = 'orders'"))
    assert acme.fresh_until == min(newest_orders, clock.now - timedelta(minutes=10))
    assert acme.fresh_type == ("orders" if newest_orders < clock.now - timedelta(minutes=10) else "products")
    assert acme.lag == clock.now - acme.fresh_until
    assert (globex.abandoned, globex.initial_running, globex.last_error, globex.error_job_id) == (
        1,
        1,
        "ShopError: page 50 broken",
        scene["abandoned"],
    )
    assert not globex.initial_complete
    assert (initech.lag, initech.abandoned, initech.last_error) == (None, 0, None)


def test_a_job_marked_completed_by_hand_without_a_time_leaves_freshness_as_it_was(monitor, scene, admin, schema, clock):
    execute(
        admin,
        schema,
        "UPDATE {jobs} SET completed_at = %s WHERE owner = 'acme' AND type = 'products'",
        [clock.now - timedelta(days=2)],
    )
    monitor.operations.enqueue("shops", "acme", "products", key="by-hand")
    execute(
        admin,
        schema,
        "UPDATE {jobs} SET status = 'completed', completed_at = NULL WHERE owner = 'acme' AND mode = 'manual'",
    )
    [acme] = monitor.owners("shops", owner="acme", now=clock.now).items
    assert acme.fresh_until == clock.now - timedelta(days=2)  # products, the stalest type, as its dated job says
    assert acme.fresh_type == "products"


def test_owners_can_be_narrowed_to_one_or_to_those_in_trouble(monitor, scene, clock):
    assert [o.owner for o in monitor.owners("shops", owner="initech", now=clock.now).items] == ["initech"]
    assert [o.owner for o in monitor.owners("shops", troubled=True, now=clock.now).items] == ["globex"]
    first = monitor.owners("shops", limit=2, now=clock.now)
    assert ([o.owner for o in first.items], first.next) == (["acme", "globex"], "globex")
    assert [o.owner for o in monitor.owners("shops", after=first.next, limit=2, now=clock.now).items] == ["initech"]


def test_an_owner_with_a_row_but_no_job_yet_is_listed_with_its_condition(monitor, scene, clock):
    """Paused before its first plan (an account connected and paused at once): no job, but a row of its own."""
    monitor.operations.store.upsert_owner(
        OwnerState("shops", "hooli", paused_at=clock.now, paused_reason="not yet approved", paused_by="ana")
    )
    listed = {o.owner: o.condition for o in monitor.owners("shops", now=clock.now).items}
    assert listed == {"acme": "healthy", "globex": "degraded", "hooli": "paused", "initech": "healthy"}
    [hooli] = monitor.owners("shops", owner="hooli", now=clock.now).items
    assert (hooli.condition, hooli.initial_total, hooli.paused_reason) == ("paused", 0, "not yet approved")
    assert monitor.owners("shops", owner="nobody", now=clock.now).items == []


def test_an_owner_shows_its_health_and_pause_and_a_paused_or_unhealthy_one_is_in_trouble(monitor, scene, clock):
    ops = monitor.operations
    ops.pause("shops", "initech", "token revoked", by="ana", now=clock.now)
    ops.store.upsert_owner(OwnerState("shops", "acme", health=OwnerHealth.DEGRADED, consecutive_failures=3))
    owners = {o.owner: o for o in monitor.owners("shops", now=clock.now).items}
    initech, acme = owners["initech"], owners["acme"]
    assert (initech.paused_at, initech.paused_reason, initech.paused_by) == (clock.now, "token revoked", "ana")
    assert (initech.health, acme.health, acme.consecutive_failures, acme.paused_at) == ("healthy", "degraded", 3, None)
    assert (owners["globex"].health, owners["globex"].paused_at) == ("healthy", None)  # no row: healthy
    troubled = monitor.owners("shops", troubled=True, now=clock.now)
    assert [o.owner for o in troubled.items] == ["acme", "globex", "initech"]
    assert [o.owner for o in monitor.owners("shops", troubled=True, after="acme", limit=1, now=clock.now).items] == [
        "globex"
    ]
    ops.resume("shops", "initech", now=clock.now)
    assert [o.owner for o in monitor.owners("shops", troubled=True, now=clock.now).items] == ["acme", "globex"]


def test_work_a_pause_holds_is_said_held_and_never_overdue(monitor, scene, admin, schema, clock):
    """initech is paused and acme-like globex's lane is throttled by a server's named wait: their due jobs are
    held, left out of the queue's oldest due wait, and each view says what holds them."""
    clock.advance(timedelta(hours=1))  # everything waiting is an hour overdue
    operations = monitor.operations
    operations.pause("shops", "initech", "token revoked", now=clock.now)
    assert monitor.queue("shops").oldest_waiting_age == timedelta(hours=1)  # globex's waiting slice
    throttled_until = clock.now + timedelta(minutes=3)
    operations.store.throttle_lane("shops", "globex", wait=timedelta(minutes=3), now=clock.now)
    operations.enqueue("shops", "globex", "products", key="while-throttled", now=clock.now)  # due, in a held lane

    summary = monitor.queue("shops")
    assert (summary.oldest_waiting_age, summary.owners_paused) == (None, 1)
    lanes = {lane.lane: lane for lane in monitor.lanes("shops").items}
    initech = rows(admin, schema, "owner = 'initech'")
    assert (lanes["initech"].held, lanes["initech"].waiting, lanes["initech"].next_due) == (
        len(initech),
        len(initech),
        None,
    )
    assert (lanes["globex"].held, lanes["globex"].throttled_until) == (0, throttled_until)
    page = monitor.jobs("shops")
    held = {job.owner: page.held[str(job.id)] for job in page.items if str(job.id) in page.held}
    assert held["initech"] == "owner paused"
    assert held["globex"] == f"lane throttled until {throttled_until:%Y-%m-%d %H:%M:%S} UTC"
    assert "acme" not in held  # completed: nothing to hold
    assert plain(page)["held"] == page.held


def test_jobs_filter_by_owner_type_status_and_mode_and_page_by_id(monitor, scene, admin, schema):
    globex_orders = rows(admin, schema, "owner = 'globex' AND type = 'orders'", order="id DESC")
    first = monitor.jobs("shops", owner="globex", type="orders", limit=1)
    assert ([j.id for j in first.items], first.next) == ([globex_orders[0]["id"]], str(globex_orders[0]["id"]))
    rest = monitor.jobs("shops", owner="globex", type="orders", before=int(first.next), limit=50)
    assert [j.id for j in rest.items] == [r["id"] for r in globex_orders[1:]]
    assert [j.id for j in monitor.jobs("shops", status="abandoned").items] == [scene["abandoned"]]
    assert {j.mode.value for j in monitor.jobs("shops", mode="recurring").items} <= {"recurring"}
    assert monitor.jobs("shops", mode="manual").items == []


def test_a_requeue_of_one_job_leaves_the_owners_other_stopped_jobs_alone(monitor, scene, admin, schema, clock):
    other = rows(admin, schema, "owner = 'globex' AND type = 'products'")[0]["id"]
    execute(admin, schema, "UPDATE {jobs} SET status = 'failed' WHERE id = %s", [other])
    assert monitor.operations.requeue("shops", job_id=scene["abandoned"], now=clock.now) == 1
    statuses = {r["id"]: (r["status"], r["cursor"]) for r in rows(admin, schema, "owner = 'globex'")}
    assert statuses[scene["abandoned"]] == ("pending", "50")
    assert statuses[other][0] == "failed"


def test_every_view_is_plain_json_data(monitor, scene, clock):
    import json

    for value in (
        monitor.queues(now=clock.now),
        monitor.lanes("shops", now=clock.now),
        monitor.owners("shops", now=clock.now),
        monitor.jobs("shops"),
    ):
        json.dumps(plain(value))
    assert plain(monitor.queue("shops", now=clock.now))["abandoned"] == 1


def test_a_page_larger_than_the_most_is_refused(monitor):
    with pytest.raises(ValueError, match="limit must be an integer from 1 to 500"):
        monitor.owners("shops", limit=501)


def test_a_status_is_counted_up_to_a_cap_and_then_said_to_have_more(monitor, scene, admin, schema, clock):
    pending = len(rows(admin, schema, "status = 'pending'"))
    summary = Monitor(monitor.operations, count_cap=pending - 1).queue("shops", now=clock.now)
    assert (summary.jobs["pending"], summary.more_than) == (pending - 1, ["pending"])
    assert monitor.queue("shops", now=clock.now).more_than == []


@pytest.mark.parametrize("outside_the_plan", ["re-sync", "by hand"])
def test_a_job_outside_the_plan_makes_no_owner_fresh_in_any_view(outside_the_plan, schema, database_url, admin, clock):
    """Freshness is one rule read three ways -- the owners view, the health check's lag and
    ``Operations.freshness`` -- and a manual job counts in none of them: acme's only completed jobs are a re-sync
    of its last two days, or jobs enqueued by hand for them, and acme still has nothing that keeps it fresh (a
    paused or failing owner must not look fresh after one)."""
    declaration = declare(
        schema, products(), orders(slice=timedelta(days=1)), owner_source=owners("acme"), max_lag=timedelta(hours=1)
    )
    today = clock.now.replace(hour=0, minute=0)
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        if outside_the_plan == "re-sync":
            ops.resync("shops", "orders", today - timedelta(days=2), clock.now, reason="totals were wrong")
            ops.resync("shops", "products", today - timedelta(days=2), clock.now, reason="totals were wrong")
        else:
            ops.enqueue("shops", "acme", "orders", window_start=today, window_end=clock.now)
            ops.enqueue("shops", "acme", "products")
        with WorkerSlot(declaration, declaration.database(database_url), "shops", clock=clock) as slot:
            assert slot.drain().jobs >= 2
        assert {(r["mode"], r["status"]) for r in rows(admin, schema)} == {("manual", "completed")}

        [acme] = Monitor(ops).owners("shops", now=clock.now).items
        assert (acme.owner, acme.fresh_until, acme.fresh_type, acme.lag) == ("acme", None, None, None)
        assert ops.freshness("shops", "acme") == {"orders": None, "products": None}
        assert ops.store.window_lags("shops", ["acme"], ["orders"], over=None, now=clock.now, limit=10) == []
