"""The owners table: one row per queue and owner with its health and pause, read and written through the store."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core import (
    DeclarationError,
    Job,
    Operations,
    Outcome,
    Owner,
    OwnerPaused,
    Page,
    Rate,
    UnknownOwnerError,
    UnknownQueueError,
    WorkerPool,
    WorkerSlot,
)
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.ops.health import MAX_FINDINGS, STUCK_AFTER_REQUEUES
from synclane_provider.core.records import OwnerState
from synclane_provider.core.run.lane_gate import LaneGate
from synclane_provider.core.states import OwnerHealth
from tests.support.helpers import Background, declare, execute, failing, orders, owners, paged, products, rows


@pytest.fixture
def store(database_url, schema):
    session = Session(declare(schema, products()).database(database_url))
    yield Store(session)
    session.close()


def test_an_owner_without_a_row_is_healthy_and_not_paused(store):
    state = store.owner("shops", "acme")
    assert state == OwnerState("shops", "acme")
    assert state.health is OwnerHealth.HEALTHY and not state.paused and state.consecutive_failures == 0


def test_an_upsert_makes_the_row_then_writes_every_column_again(store, admin, schema, clock):
    paused = OwnerState(
        "shops",
        "acme",
        health=OwnerHealth.FAILING,
        consecutive_failures=7,
        last_error="HTTPError: 401",
        failing_since=clock.now - timedelta(hours=1),
        paused_at=clock.now,
        paused_reason="token revoked",
        paused_by="handler",
        last_clean_at=clock.now - timedelta(days=1),
        alerted_at=clock.now,
        alerted_for="paused",
    )
    written = store.upsert_owner(paused, now=clock.now)
    assert written == OwnerState(**{**paused.__dict__, "updated_at": clock.now})
    assert store.owner("shops", "acme") == written
    assert store.owner("other", "acme") == OwnerState("other", "acme")  # one row per queue and owner

    later = clock.advance(timedelta(minutes=5))
    resumed = store.upsert_owner(OwnerState("shops", "acme", last_clean_at=later), now=later)
    assert resumed == OwnerState("shops", "acme", last_clean_at=later, updated_at=later)
    count = admin.execute(f'SELECT count(*) AS n FROM "{schema}".owners').fetchone()["n"]
    assert count == 1


def test_an_unknown_health_is_refused_by_the_named_rule(store, admin, schema):
    store.upsert_owner(OwnerState("shops", "acme"))
    with pytest.raises(psycopg.errors.CheckViolation, match="owners_health_is_known"):
        execute(admin, schema, "UPDATE {owners} SET health = 'disabled' WHERE owner = 'acme'")


def test_the_documented_operator_update_resumes_an_owner(store, admin, schema, clock):
    store.upsert_owner(OwnerState("shops", "acme", paused_at=clock.now, paused_reason="gone", paused_by="handler"))
    execute(
        admin,
        schema,
        "UPDATE {owners} SET paused_at = NULL, paused_reason = NULL, paused_by = NULL, updated_at = now() "
        "WHERE queue = 'shops' AND owner = 'acme'",
    )
    assert not store.owner("shops", "acme").paused


# --- a handler pauses its owner --------------------------------------------------------------------------------


class Revoked:
    """A handler whose owners in ``revoked`` answer as a revoked token does from their ``after``-th page on."""

    def __init__(self, *revoked: str, after: int = 1, total: int = 150) -> None:
        self.revoked, self.after, self.total = set(revoked), after, total
        self.calls: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> Page:
        with self._lock:
            self.calls.append((job.owner, job.cursor))
            pages_of_owner = sum(1 for owner, _ in self.calls if owner == job.owner)
        if job.owner in self.revoked and pages_of_owner > self.after:
            try:
                raise PermissionError(f"401 Unauthorized for https://api.example.com/v1/{job.owner}/orders")
            except PermissionError as exc:  # as a handler turns its client's error into a pause
                raise OwnerPaused(f"401 Unauthorized: the token of {job.owner} was revoked") from exc
        return paged(self.total)(job)

    def pages(self, owner: str) -> int:
        return sum(1 for who, _ in self.calls if who == owner)


def test_owner_paused_pauses_the_owner_and_hands_its_job_back_at_its_cursor(database_url, schema, admin, clock, store):
    handler = Revoked("acme", after=1)
    declaration = declare(schema, products(handler), owner_source=owners("acme"))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        result = slot.run_one()
        assert result is not None and result.outcome is Outcome.PAUSED and result.pages == 1
        assert slot.run_one() is None  # the job waits, taken by nobody
        clock.advance(timedelta(days=3))  # due long ago, planned again: still nothing is taken
        ops.plan("shops", now=clock.now)
        assert slot.run_one() is None
        activity, wakeup = ops.activity("shops", now=clock.now), slot.store.wakeup("shops", now=clock.now)
        assert activity.settled and activity.drained  # what waits for a resume waits for no worker
        assert wakeup.settled and not wakeup.takeable and wakeup.wake_at is None

    [job] = rows(admin, schema, "owner = 'acme'")
    assert job["status"] == "pending" and job["cursor"] == "50" and job["processed_count"] == 50
    assert job["attempt_count"] == 0 and job["error"] is None  # not a failure: no attempt used
    state = store.owner("shops", "acme")
    assert state.paused and state.paused_by == "handler"
    assert state.paused_reason == "401 Unauthorized: the token of acme was revoked"
    assert handler.calls == [("acme", None), ("acme", "50")]  # not one more page requested


@pytest.mark.parametrize("jobs_per_slot", [1, 4])
def test_a_paused_owner_in_a_shared_lane_does_not_hold_up_its_lane_mates(
    database_url, schema, admin, clock, store, jobs_per_slot
):
    """acme's jobs stand first in the shared lane (its orders come before globex's snapshot, newest first), so a
    take that stopped at the lane's head would find nothing for globex."""
    handler = Revoked("acme", after=0)
    declaration = declare(
        schema,
        orders(handler),
        products(handler),
        owner_source=owners(Owner("acme", lane="shared"), Owner("globex", lane="shared")),
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops", now=clock.now)
        summary = WorkerPool(declaration, database, "shops", slots=2, jobs_per_slot=jobs_per_slot, clock=clock).drain()

    assert summary.outcomes["paused"] == 1
    assert handler.pages("acme") == 1
    globex = rows(admin, schema, "owner = 'globex'")
    assert globex and {job["status"] for job in globex} == {"completed"}
    acme = rows(admin, schema, "owner = 'acme'")
    assert len(acme) == len(globex) and {job["status"] for job in acme} == {"pending"}
    assert store.owner("shops", "acme").paused and not store.owner("shops", "globex").paused


def test_a_job_running_when_its_owner_is_paused_stops_after_its_page_in_flight(
    database_url, schema, admin, clock, store
):
    def handler(job: Job) -> Page:
        if job.cursor == "50":  # the second page: someone pauses the owner while it is in flight
            store.pause_owner("shops", "acme", reason="account closing", by="ops", now=clock.now)
        return paged(500)(job)

    declaration = declare(schema, products(handler))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        result = slot.run_one()
    assert result is not None and result.outcome is Outcome.RELEASED and result.pages == 2
    [job] = rows(admin, schema)
    assert (job["status"], job["cursor"], job["attempt_count"]) == ("pending", "100", 0)
    state = store.owner("shops", "acme")
    assert (state.paused_by, state.paused_reason) == ("ops", "account closing")


def running(admin, schema, what: str, timeout: float = 30.0) -> None:
    """Wait (polling the row, not sleeping a guess) until a job of the test's is running: its worker has taken it."""
    deadline = time.monotonic() + timeout
    while not rows(admin, schema, "status = 'running'"):
        assert time.monotonic() < deadline, f"{what} was never taken"
        time.sleep(0.01)


@pytest.mark.parametrize(("rate", "clearances"), [(None, 1), (Rate(100, burst=10), 0)], ids=["no rate", "a rate"])
def test_a_job_taken_with_the_last_ones_finish_asks_for_no_page_once_its_owner_is_paused(
    database_url, schema, admin, clock, rate, clearances
):
    """The slot's finish of acme's first job took acme's next; the owner is paused before the slot runs it: not one
    page is requested for it, and it goes back to pending, its attempt not counted. Asked right before the page: in
    a statement of its own, or, in a lane with a rate and its turn free at once, in the take of that turn."""
    handler = Revoked(total=0)
    declaration = declare(schema, products(handler), orders(handler), owner_source=owners("acme"), rate=rate)
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        assert slot.run_one().outcome is Outcome.COMPLETED
        held = slot.next_job
        assert held is not None and held.owner == "acme"
        ops.pause("shops", "acme", "account closing", now=clock.now)
        before = database.traffic.snapshot()
        result = slot.run_one()
        sent = (database.traffic - before).statements
    assert (result.job.id, result.outcome, result.pages, result.waited) == (held.id, Outcome.RELEASED, 0, timedelta(0))
    assert handler.pages("acme") == 1  # the first job's page only
    assert sent["page_clearance"] == clearances
    [row] = rows(admin, schema, "id = %s", [held.id])
    assert (row["status"], row["cursor"], row["attempt_count"], row["leased_by"]) == ("pending", None, 0, None)


def test_a_job_waiting_out_a_throttle_on_its_lane_asks_for_no_page_once_its_owner_is_paused(
    database_url, schema, admin, clock, store
):
    """A throttle holds acme's lane for two seconds; acme's job, enqueued meanwhile, is taken and waits the pause out
    before its first page. The owner is paused while it waits: the page is not requested."""
    handler = Revoked()
    declaration = declare(schema, products(handler), owner_source=owners("acme"))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        store.throttle_lane("shops", "acme", wait=timedelta(seconds=2), now=clock.now)
        ops.enqueue("shops", "acme", "products", key="now", now=clock.now)
        working = Background(slot.run_one, name="slot")
        running(admin, schema, "acme's job")
        ops.pause("shops", "acme", "account closing", now=clock.now)
        result = working.result()
    assert (result.outcome, result.pages, handler.pages("acme")) == (Outcome.RELEASED, 0, 0)
    assert result.waited >= timedelta(seconds=1.9)  # it did wait: the pause came while it waited
    [row] = rows(admin, schema)
    assert (row["status"], row["attempt_count"], row["leased_by"]) == ("pending", 0, None)


def test_a_job_waiting_for_its_turn_in_a_slow_lane_asks_for_no_page_once_its_owner_is_paused(
    database_url, schema, admin, clock, store
):
    """acme's lane may send one request every two seconds and another worker has just taken this turn: the job waits
    two seconds for the next. The owner is paused after the job took its turn, while it waits: the page is not
    requested (the turn goes unused)."""
    rate = Rate(1, per=timedelta(seconds=2), headroom=0)
    handler = Revoked()
    declaration = declare(schema, products(handler), owner_source=owners("acme"), rate=rate)
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        assert store.take_lane_budget("shops", "acme", cost=rate.interval, tolerance=rate.tolerance, now=clock.now) == 0
        ops.enqueue("shops", "acme", "products", key="now", now=clock.now)
        working = Background(slot.run_one, name="slot")
        turns = sql.SQL("SELECT tat FROM {}.lane_budgets").format(sql.Identifier(schema))
        deadline = time.monotonic() + 30
        while admin.execute(turns).fetchone()["tat"] < clock.now + 2 * rate.interval:  # the job's turn is taken
            assert time.monotonic() < deadline, "the job never took its turn"
            time.sleep(0.01)
        ops.pause("shops", "acme", "account closing", now=clock.now)
        result = working.result()
    assert (result.outcome, result.pages, handler.pages("acme")) == (Outcome.RELEASED, 0, 0)
    assert result.waited >= timedelta(seconds=1.9)
    [row] = rows(admin, schema)
    assert (row["status"], row["attempt_count"], row["leased_by"]) == ("pending", 0, None)


def test_a_page_that_wakes_too_late_for_its_turn_asks_for_no_page_once_its_owner_is_paused_during_the_next(
    database_url, schema, admin, clock, store, monkeypatch
):
    """The page starts 0.2 s after its turn in a lane of two requests a second, past the room its turn leaves, and
    takes a new turn; the owner is paused right after that take, while the page waits for it: the page is not
    requested."""
    handler = Revoked()
    declaration = declare(schema, products(handler), owner_source=owners("acme"), rate=Rate(2))
    database = declaration.database(database_url)
    before_page, take_budget = LaneGate.before_page, Store.take_page_turn
    takes = []

    def woke_late(gate, job, **kwargs):
        turn = yield from before_page(gate, job, **kwargs)
        time.sleep(0.2)
        return turn

    def pause_after_the_second_take(taker, *args, **kwargs):
        taken = take_budget(taker, *args, **kwargs)
        takes.append(taken)
        if len(takes) == 2:
            store.pause_owner("shops", "acme", reason="account closing", by="ops", now=clock.now)
        return taken

    monkeypatch.setattr(LaneGate, "before_page", woke_late)
    monkeypatch.setattr(Store, "take_page_turn", pause_after_the_second_take)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.enqueue("shops", "acme", "products", key="now", now=clock.now)
        result = slot.run_one()
    assert (result.outcome, result.pages, len(takes), handler.pages("acme")) == (Outcome.RELEASED, 0, 2, 0)
    assert takes[1].wait > 0  # the new turn was waited for: the pause came while it waited
    [row] = rows(admin, schema)
    assert (row["status"], row["attempt_count"], row["leased_by"]) == ("pending", 0, None)


def test_a_second_pause_keeps_the_first(store, clock):
    first = store.pause_owner("shops", "acme", reason="token revoked", by="handler", now=clock.now)
    again = store.pause_owner("shops", "acme", reason="other", by="ops", now=clock.advance(timedelta(minutes=1)))
    assert (again.paused_at, again.paused_reason, again.paused_by) == (first.paused_at, "token revoked", "handler")


@pytest.mark.parametrize("reason", ["", "  ", None, 401])
def test_owner_paused_needs_a_reason(reason):
    with pytest.raises(ValueError, match="OwnerPaused needs a reason"):
        OwnerPaused(reason)


def test_lane_mates_behind_many_jobs_of_a_paused_owner_run_deferred_ones_too(database_url, schema, admin, clock, store):
    """acme, paused, has sixty due jobs ahead of all of globex's in their shared lane (globex's stand last in the
    queue's order, one of them deferred): the take looks past acme's at the lane's head, and a deferred job goes
    when only a paused owner's jobs are left beside it."""
    handler = Revoked()
    declaration = declare(
        schema,
        orders(handler, horizon=timedelta(days=60), slice=timedelta(days=1)),
        owner_source=owners(Owner("acme", lane="shared"), Owner("globex", lane="shared")),
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        store.pause_owner("shops", "acme", reason="token revoked", by="ops", now=clock.now)
        execute(admin, schema, "UPDATE {jobs} SET priority = 9 WHERE owner = 'globex'")
        execute(
            admin,
            schema,
            "UPDATE {jobs} SET status = 'deferred', attempt_count = 5 "
            "WHERE id = (SELECT max(id) FROM {jobs} WHERE owner = 'globex')",
        )
        slot.drain()

    acme, globex = rows(admin, schema, "owner = 'acme'"), rows(admin, schema, "owner = 'globex'")
    assert len(acme) > 32 and {job["status"] for job in acme} == {"pending"}
    assert len(globex) == len(acme) and {job["status"] for job in globex} == {"completed"}
    assert handler.pages("acme") == 0


# --- pause and resume as operations ----------------------------------------------------------------------------


def test_resume_continues_every_job_from_its_cursor_and_plans_what_the_pause_skipped(
    database_url, schema, admin, clock
):
    """acme is revoked on its third page, stays paused a day (planning every quarter hour meanwhile, nothing for
    it), is resumed: its jobs finish from their cursors and one recurring window reaches over the pause."""
    handler = Revoked("acme", after=2)
    declaration = declare(schema, orders(handler), owner_source=owners("acme", "globex"))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        slot.drain()
        assert ops.owner("shops", "acme").paused
        stopped = {job["id"]: job["cursor"] for job in rows(admin, schema, "owner = 'acme' AND status = 'pending'")}
        assert stopped and set(stopped.values()) - {None} == {"100"}
        covered = max(job["window_end"] for job in rows(admin, schema, "owner = 'acme'"))
        for _ in range(96):
            clock.advance(timedelta(minutes=15))
            ops.plan("shops", now=clock.now)
            slot.drain()
        assert {job["id"] for job in rows(admin, schema, "owner = 'acme'")} == set(stopped)  # nothing new for it
        assert [o.owner for o in ops.owners("shops", troubled=True)] == ["acme"]

        handler.revoked.clear()
        handler.calls.clear()
        state = ops.resume("shops", "acme", now=clock.now)
        assert not state.paused and not ops.owner("shops", "acme").paused
        slot.drain()

    acme = rows(admin, schema, "owner = 'acme'")
    assert {job["status"] for job in acme} == {"completed"}
    resumed_from = [cursor for owner, cursor in handler.calls if owner == "acme"]
    assert "100" in resumed_from and resumed_from.count(None) == len(acme) - len(stopped) + sum(
        1 for cursor in stopped.values() if cursor is None
    )  # the job revoked mid-way went on from its cursor; the others and the new window from their start
    [new] = [job for job in acme if job["id"] not in stopped]
    assert (
        new["mode"] == "recurring"
        and new["window_start"] <= covered
        and new["window_end"] > covered + timedelta(hours=23)
    )  # one window over the whole pause, from where coverage ended (minus the overlap)
    assert ops.owners("shops", troubled=True) == []


def test_pause_and_resume_refuse_what_cannot_be_paused(database_url, schema, clock):
    declaration = declare(schema, products(), owner_source=owners("acme"))
    with Operations(declaration, declaration.database(database_url)) as ops:
        with pytest.raises(UnknownOwnerError, match="nobody"):
            ops.pause("shops", "nobody", "gone")
        with pytest.raises(UnknownQueueError, match="nowhere"):
            ops.pause("nowhere", "acme", "gone")
        with pytest.raises(DeclarationError, match="reason"):
            ops.pause("shops", "acme", "  ")
        with pytest.raises(DeclarationError, match="by"):
            ops.pause("shops", "acme", "gone", by="")
        with pytest.raises(ValueError, match="limit"):
            ops.owners("shops", limit=0)
        with pytest.raises(UnknownOwnerError, match="'umbrela' is not listed by the owner source of queue 'shops'"):
            ops.resume("shops", "umbrela", now=clock.now)  # a typo: nobody lists it, nothing is paused
        with pytest.raises(UnknownQueueError, match="nowhere"):
            ops.resume("nowhere", "acme", now=clock.now)
        assert ops.resume("shops", "acme", now=clock.now) == OwnerState("shops", "acme")  # not paused: no change
        state = ops.pause("shops", "acme", "account closing", by="ana", now=clock.now)
        assert (state.paused_at, state.paused_reason, state.paused_by) == (clock.now, "account closing", "ana")


def test_pausing_an_owner_the_source_does_not_list_names_the_first_five_it_lists_and_how_many_more(
    database_url, schema
):
    listed = [f"shop-{n}" for n in range(1, 8)]
    declaration = declare(schema, products(), owner_source=owners(*listed))
    with Operations(declaration, declaration.database(database_url)) as ops:
        with pytest.raises(UnknownOwnerError) as refused:
            ops.pause("shops", "shop-9", "gone")
    assert str(refused.value) == (
        "owner 'shop-9' is not listed by the owner source of queue 'shops', "
        "which lists shop-1, shop-2, shop-3, shop-4, shop-5 and 2 more"
    )


def test_an_owner_paused_and_then_dropped_from_the_source_can_still_be_resumed(database_url, schema, admin, clock):
    """Its row says it is paused (and its waiting jobs wait for a resume): the resume clears the pause and plans
    nothing for it, since nobody lists it any more."""
    listed = ["acme", "globex"]
    declaration = declare(schema, products(), owner_source=lambda queue: listed)
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now)
        ops.pause("shops", "globex", "contract ended", by="ana", now=clock.now)
        listed.remove("globex")
        planned = rows(admin, schema)
        state = ops.resume("shops", "globex", now=clock.advance(timedelta(days=2)))
        assert not state.paused and not ops.owner("shops", "globex").paused
        assert rows(admin, schema) == planned
        with pytest.raises(UnknownOwnerError, match="'globex' is not listed"):
            ops.resume("shops", "globex", now=clock.now)  # resumed already: nothing is paused any more


# --- seen and alerted ------------------------------------------------------------------------------------------


def test_the_health_check_fails_once_when_a_handler_pauses_its_owner_and_once_when_an_owner_turns_failing(
    database_url, schema, clock, store
):
    handler = Revoked("acme", after=0)
    declaration = declare(schema, products(handler), owner_source=owners("acme", "globex", "initech"))
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        slot.drain()
        first = ops.check_health("shops", abandoned_since=None, now=clock.now)
        assert [(f.problem, f.owner) for f in first.findings] == [("paused", "acme")]
        assert first.findings[0].message == (  # the alert names the error that made the handler pause it
            "paused: owner acme was paused by its handler at 2026-11-30 10:20 UTC: 401 Unauthorized: the token of "
            "acme was revoked; last error: PermissionError: 401 Unauthorized for "
            "https://api.example.com/v1/acme/orders; none of its jobs runs until it is resumed"
        )
        assert ops.check_health("shops", abandoned_since=None, now=clock.advance(timedelta(minutes=5))).healthy
        assert ops.check_health("shops", abandoned_since=None, now=clock.advance(timedelta(minutes=5))).healthy

        failing_since = clock.now - timedelta(minutes=1)
        store.upsert_owner(
            OwnerState(
                "shops",
                "globex",
                health=OwnerHealth.FAILING,
                consecutive_failures=10,
                last_error="ShopError: 503",
                failing_since=failing_since,
            )
        )
        ops.pause("shops", "initech", "contract ended", by="ana", now=clock.now)  # a person's pause: no alert
        [failing] = ops.check_health("shops", abandoned_since=None, now=clock.now).findings
        assert failing.message == (
            "failing: owner globex is failing since 2026-11-30 10:29 UTC after 10 failed attempt(s) in a row; "
            "last error: ShopError: 503"
        )
        assert ops.check_health("shops", abandoned_since=None, now=clock.now).healthy

        ops.resume("shops", "acme", now=clock.advance(timedelta(minutes=1)))  # revoked again on its next page
        slot.drain()
        [again] = ops.check_health("shops", abandoned_since=None, now=clock.now).findings
        assert (again.problem, again.owner) == ("paused", "acme")  # a new pause is a new event

        gauges = ops.gauges("shops", now=clock.now)
        # acme and initech paused, globex failing: a paused owner is never counted healthy
        assert (gauges.owners_healthy, gauges.owners_degraded, gauges.owners_failing, gauges.owners_paused) == (
            0,
            0,
            1,
            2,
        )


def test_the_owner_gauges_are_emitted_beside_the_queue_gauges(database_url, schema, clock, store):
    declaration = declare(schema, products(), owner_source=owners("acme", "globex"))
    sent: dict[str, float] = {}

    class Recording:
        def gauge(self, metric, tags, value):
            sent[metric.name] = value

    with Operations(declaration, declaration.database(database_url)) as ops:
        store.upsert_owner(OwnerState("shops", "acme", health=OwnerHealth.DEGRADED))
        ops.pause("shops", "globex", "token revoked", now=clock.now)
        ops.gauges("shops", now=clock.now).emit(Recording())
    assert {name: value for name, value in sent.items() if name.startswith("synclane.owners.")} == {
        "synclane.owners.healthy": 0,
        "synclane.owners.degraded": 1,
        "synclane.owners.failing": 0,
        "synclane.owners.paused": 1,
        "synclane.owners.behind": 0,
    }


def test_owners_in_trouble_beyond_one_checks_findings_are_said_to_be_there_and_alerted_by_the_next_check(
    database_url, schema, clock, store
):
    """One owner more than a check reports turns failing (and one more is paused by its handler): the first
    check reports the first ones by name and says that more are left, the next one reports those left, and
    none is reported twice."""
    declaration = declare(schema, products(), owner_source=owners("acme"))
    failing = [f"owner-{n:03}" for n in range(MAX_FINDINGS + 1)]
    for owner in failing:
        store.upsert_owner(
            OwnerState("shops", owner, health=OwnerHealth.FAILING, consecutive_failures=10, failing_since=clock.now)
        )
    store.upsert_owner(OwnerState("shops", "zeta", paused_at=clock.now, paused_by="handler", paused_reason="401"))
    with Operations(declaration, declaration.database(database_url)) as ops:
        first = ops.check_health("shops", abandoned_since=None, now=clock.now)
        second = ops.check_health("shops", abandoned_since=None, now=clock.advance(timedelta(minutes=5)))
        third = ops.check_health("shops", abandoned_since=None, now=clock.advance(timedelta(minutes=5)))

    assert [f.owner for f in first.findings] == failing[:MAX_FINDINGS]
    assert first.describe().splitlines()[-2:] == [
        f"- … and more paused owners beyond the first {MAX_FINDINGS}: the next check reports them",
        f"- … and more failing owners beyond the first {MAX_FINDINGS}: the next check reports them",
    ]
    assert [(f.problem, f.owner) for f in second.findings] == [("failing", failing[-1]), ("paused", "zeta")]
    assert "… and more" not in second.describe()
    assert third.healthy


def test_each_listed_owner_is_counted_once_in_its_worst_condition_so_the_gauges_add_up_to_the_owners_listed(
    database_url, schema, admin, clock, store
):
    """paused over failing over degraded (an abandoned job, or its health) over behind over healthy; an owner
    dropped from the source counts nowhere, and the planning log line says the same."""
    declaration = declare(
        schema,
        orders(paged(1), horizon=timedelta(days=2), slice=timedelta(days=1)),
        owner_source=owners("acme", "globex", "initech", "umbrella", "wayne", "stark"),
        max_lag=timedelta(hours=2),
    )
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now)
        execute(  # every job done, reaching now, but stark's, which reached three hours ago
            admin,
            schema,
            "UPDATE {jobs} SET status = 'completed', completed_at = %s,"
            " window_end = CASE WHEN owner = 'stark' THEN %s ELSE %s END WHERE mode = 'recurring'",
            [clock.now, clock.now - timedelta(hours=3), clock.now],
        )
        execute(admin, schema, "UPDATE {jobs} SET status = 'abandoned' WHERE owner = 'initech' AND mode = 'initial'")
        ops.pause("shops", "umbrella", "token revoked", now=clock.now)
        store.upsert_owner(OwnerState("shops", "umbrella", health=OwnerHealth.FAILING, paused_at=clock.now))
        store.upsert_owner(OwnerState("shops", "globex", health=OwnerHealth.FAILING, consecutive_failures=9))
        store.upsert_owner(OwnerState("shops", "wayne", health=OwnerHealth.DEGRADED, consecutive_failures=3))
        store.upsert_owner(OwnerState("shops", "gone", health=OwnerHealth.FAILING, consecutive_failures=9))
        gauges = ops.gauges("shops", now=clock.now)

    assert {c.value: n for c, n in gauges.owners.items()} == {
        "paused": 1,  # umbrella, failing too
        "failing": 1,  # globex
        "degraded": 2,  # initech (an abandoned job) and wayne
        "behind": 1,  # stark
        "healthy": 1,  # acme
    }
    assert gauges.describe_owners() == "owners 1 healthy, 1 behind, 2 degraded, 1 failing, 1 paused (6 listed)"


def test_the_healthy_owners_are_the_listed_ones_neither_degraded_nor_failing_whatever_unlisted_owners_do(
    database_url, schema, clock, store
):
    """initech was dropped from the owner source while failing, and its row stays: it hides no listed owner."""
    declaration = declare(schema, products(), owner_source=owners("acme", "globex", "umbrella"))
    store.upsert_owner(OwnerState("shops", "globex", health=OwnerHealth.DEGRADED, consecutive_failures=3))
    store.upsert_owner(OwnerState("shops", "initech", health=OwnerHealth.FAILING, consecutive_failures=10))
    store.upsert_owner(OwnerState("shops", "umbrella", last_clean_at=clock.now))
    with Operations(declaration, declaration.database(database_url)) as ops:
        gauges = ops.gauges("shops", now=clock.now)
    assert gauges.owners_healthy == 2  # acme (no row) and umbrella


def test_a_check_that_names_itself_is_told_its_own_claims_again_and_no_other_check_is(database_url, schema, clock):
    """A second try of the same check (Airflow ran its task again after a try whose failure it never recorded)
    reports the pause its first try claimed; another check, named or not, does not."""
    declaration = declare(schema, products(), owner_source=owners("acme", "globex"))
    with Operations(declaration, declaration.database(database_url)) as ops:
        ops.plan("shops", now=clock.now)
        ops.store.upsert_owner(
            OwnerState("shops", "acme", paused_at=clock.now, paused_by="handler", paused_reason="401 Unauthorized")
        )

        def paused(claimant: str | None) -> list[str]:
            report = ops.check_health("shops", abandoned_since=None, now=clock.now, claimant=claimant)
            return [f.owner for f in report.findings if f.problem == "paused"]

        assert paused("synclane_health/run-1/check") == ["acme"]
        assert paused("synclane_health/run-1/check") == ["acme"]  # its second try
        assert paused("synclane_health/run-2/check") == []
        assert paused(None) == []
        assert paused("synclane_health/run-1/check") == ["acme"]  # still the claim's owner


def test_a_window_abandoned_again_after_its_requeues_is_a_stuck_window_said_once(database_url, schema, clock):
    declaration = declare(schema, products(failing(RuntimeError("page 50 answers 500"))), max_attempts=1)
    database = declaration.database(database_url)
    problems = []
    with Operations(declaration, database) as ops, WorkerSlot(declaration, database, "shops", clock=clock) as slot:
        ops.plan("shops", now=clock.now)
        for round in range(STUCK_AFTER_REQUEUES + 2):
            since = clock.now
            while slot.run_one() is not None:
                clock.advance(timedelta(hours=1))  # its retry, then its last attempt, come due
            [job] = ops.list_jobs("shops")
            assert job.status == "abandoned"
            report = ops.check_health("shops", abandoned_since=since, now=clock.now)
            problems.append([finding.problem.value for finding in report.findings])
            if round == STUCK_AFTER_REQUEUES:
                assert report.findings[0].message.startswith(
                    f"stuck window: owner acme, job acme/products #{job.id}, abandoned again at cursor None after "
                    f"{STUCK_AFTER_REQUEUES} requeues: RuntimeError: page 50 answers 500"
                )
            assert ops.requeue("shops", now=clock.now) == 1
    of_the_window = [[problem for problem in found if problem != "failing"] for found in problems]
    assert of_the_window == [["abandoned"]] * STUCK_AFTER_REQUEUES + [["stuck window"], ["abandoned"]]
    assert sum(found.count("failing") for found in problems) == 1  # its owner turned failing on the way: said once
