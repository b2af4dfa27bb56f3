"""Lanes k wide: up to ``lane_width`` jobs of a lane run at once, held by a unique index over running slots."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

import psycopg.errors
import pytest
from psycopg import sql

from synclane_provider.core import JobStatus, Operations, Owner, Queue, SyncLane, WorkerSlot
from synclane_provider.core.db.store import Finish
from synclane_provider.core.declare.retry import Jitter, RetryPolicy
from synclane_provider.core.errors import DeclarationError, OwnerSourceError
from tests.support.helpers import declare, orders, owners, products, rows
from tests.support.lane_race import lane_race, max_concurrency

HARSH = {"waves": 20, "page_seconds": 0.02}
"""Twenty moments when every worker asks at once, and pages long enough that a slot taken twice is seen running
beside the lane's other slot: without the index the race then shows every time (measured: 3-5 at once)."""


@contextmanager
def operations_and_slots(declaration: SyncLane, database_url: str, clock, count: int) -> Iterator[tuple]:
    """Operations and ``count`` worker slots of the queue shops on one database, all closed afterwards."""
    database = declaration.database(database_url)
    with ExitStack() as stack:
        ops = stack.enter_context(Operations(declaration, database, clock=clock))
        slots = [stack.enter_context(WorkerSlot(declaration, database, "shops", clock=clock)) for _ in range(count)]
        yield ops, slots


def test_the_concurrency_count_sees_touching_intervals_as_apart():
    assert max_concurrency({"a": [(0, 1), (1, 2)], "b": [(0, 3), (1, 2), (1.5, 4)]}) == {"a": 1, "b": 3}


def test_24_workers_on_3_lanes_of_width_2_run_at_most_2_jobs_of_a_lane_at_once(database_url, fresh_schema):
    result = lane_race(database_url, fresh_schema, workers=24, lanes=3, jobs=600, width=2, **HARSH)
    assert result.jobs == 600
    assert result.max_running == {"lane-0": 2, "lane-1": 2, "lane-2": 2}  # the width is used, and never passed


def test_without_the_slot_index_the_same_race_runs_a_lane_wider_than_2(database_url, fresh_schema):
    result = lane_race(
        database_url, fresh_schema, workers=24, lanes=3, jobs=600, width=2, keep_lane_index=False, **HARSH
    )
    assert result.jobs == 600
    assert result.max_running_per_lane > 2  # the check can fail: the index is what holds the width


@pytest.mark.parametrize("width", [0, -1, 1.5, "2", True, None])
def test_a_lane_width_that_is_not_a_whole_number_of_at_least_1_is_refused_when_declared(width):
    with pytest.raises(DeclarationError, match="lane_width of owner 'acme' must be a whole number of at least 1"):
        Owner("acme", lane_width=width)


def test_owners_sharing_a_lane_must_give_it_one_width(schema, database_url):
    declaration = declare(
        schema,
        products(),
        owner_source=owners(Owner("acme-us", "acme", lane_width=2), Owner("acme-eu", "acme", lane_width=3)),
    )
    with Operations(declaration, declaration.database(database_url)) as ops:
        with pytest.raises(
            OwnerSourceError,
            match="gives lane 'acme' two widths: lane_width=2 for owner 'acme-us' and lane_width=3 for owner 'acme-eu'",
        ):
            ops.plan("shops")


def test_a_width_k_lane_lets_k_workers_in_and_the_next_one_waits_for_a_free_slot(schema, database_url, admin, clock):
    declaration = declare(
        schema,
        orders(horizon=timedelta(days=120), slice=timedelta(days=30)),
        owner_source=owners(Owner("acme-us", "acme", lane_width=2), Owner("acme-eu", "acme", lane_width=2)),
    )
    with operations_and_slots(declaration, database_url, clock, 3) as (ops, (first, second, third)):
        ops.plan("shops")
        assert {r["lane_width"] for r in rows(admin, schema)} == {2}
        a, b = first.take(), second.take()
        assert (a.lane, a.lane_slot, b.lane, b.lane_slot) == ("acme", 0, "acme", 1)
        assert third.take() is None  # both slots held: the third waits, though six jobs are due
        assert third.store.wakeup("shops", now=clock.now).takeable is False  # an idle worker sleeps on
        assert first.store.release(a.id, worker=first.worker_id, processed_count=0, now=clock.now)
        assert third.store.wakeup("shops", now=clock.now).takeable is True
        c = third.take()
        assert (c.lane, c.lane_slot) == ("acme", 0)  # the freed slot, not a third one


def test_lowering_the_width_applies_to_waiting_jobs_at_the_next_plan_and_running_ones_keep_their_slot(
    schema, database_url, admin, clock
):
    width = {"acme": 3}
    declaration = declare(
        schema,
        orders(horizon=timedelta(days=120), slice=timedelta(days=30)),
        owner_source=lambda queue: [Owner("acme", lane_width=width["acme"])],
    )
    with operations_and_slots(declaration, database_url, clock, 3) as (ops, (first, second, third)):
        ops.plan("shops", now=clock.now)
        held = [first.take(), second.take(), third.take()]
        assert [job.lane_slot for job in held] == [0, 1, 2]
        width["acme"] = 1
        assert ops.plan("shops", now=clock.now).moved > 0
        waiting = rows(admin, schema, "status <> 'running'")
        assert waiting and {r["lane_width"] for r in waiting} == {1}
        assert {(r["lane_slot"], r["lane_width"]) for r in rows(admin, schema, "status = 'running'")} == {
            (0, 3),
            (1, 3),
            (2, 3),
        }
        for slot, job in zip((first, second, third), held):
            assert slot.store.release(job.id, worker=slot.worker_id, processed_count=0, now=clock.now)
        # The jobs that were running wait again with the width they ran under until the next plan moves them.
        assert ops.plan("shops", now=clock.now).moved == 3
        assert first.take() is not None and second.take() is None  # width 1 from now on


def test_a_take_that_names_no_slot_still_runs_a_lane_of_width_1_one_job_at_a_time(schema, database_url, admin, clock):
    """A worker of the release before 0005 (during a rolling upgrade) sets status and lease but no slot:
    every job is slot 0 until a take chooses another, so two of its takes in one lane collide on the index."""
    declaration = declare(schema, orders(horizon=timedelta(days=60), slice=timedelta(days=30)))
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.plan("shops", now=clock.now)
    old_take = sql.SQL(
        "UPDATE {}.jobs SET status = 'running', leased_by = 'old', lease_expires_at = now() + interval '5 min' "
        "WHERE id = %s"
    ).format(sql.Identifier(schema))
    first, second = (row["id"] for row in rows(admin, schema)[:2])
    admin.execute(old_take, [first])
    with pytest.raises(psycopg.errors.UniqueViolation, match="jobs_one_running_per_lane_slot"):
        admin.execute(old_take, [second])


def test_a_running_job_cannot_hold_a_slot_outside_its_lane(schema, database_url, admin, clock):
    declaration = declare(schema, products())
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        ops.plan("shops", now=clock.now)
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_running_slot_in_lane"):
        admin.execute(
            sql.SQL(
                "UPDATE {}.jobs SET status = 'running', lane_slot = 1, leased_by = 'w', lease_expires_at = now()"
            ).format(sql.Identifier(schema))
        )


@pytest.fixture
def behind_a_full_lane(schema, database_url, clock):
    """Lane big (1 wide) holds the head of the queue, 40 jobs, one of them running; acme (2 wide) has 3 jobs
    behind them. Every job among the first due is in a full lane: a take walks the lanes to find acme's."""
    declaration = declare(schema, products(), owner_source=owners("big", Owner("acme", lane_width=2)))
    database = declaration.database(database_url)
    made = []

    def slot() -> WorkerSlot:
        made.append(WorkerSlot(declaration, database, "shops", clock=clock))
        return made[-1]

    with Operations(declaration, database, clock=clock) as ops:
        for n in range(40):
            ops.enqueue("shops", "big", "products", key=f"big-{n}")
        for n in range(3):
            ops.enqueue("shops", "acme", "products", key=f"acme-{n}")
        assert slot().take().owner == "big"
        yield slot
    for worker in made:
        worker.close()


def test_the_lane_walk_gives_a_wide_lanes_free_slot_and_hands_a_finished_lane_to_its_next_job(
    behind_a_full_lane, admin, schema, clock
):
    first, second, third = behind_a_full_lane(), behind_a_full_lane(), behind_a_full_lane()
    a, b = first.take(), second.take()
    assert [(a.owner, a.lane_slot), (b.owner, b.lane_slot)] == [("acme", 0), ("acme", 1)]
    assert third.take() is None  # big and acme full

    done = first.store.finish_and_take(
        queue="shops",
        worker=first.worker_id,
        lease=timedelta(minutes=5),
        finish=Finish(a.id, JobStatus.COMPLETED, 0),
        take=True,
        now=clock.now,
    )
    assert done.finished and done.taken is not None
    assert (done.taken.job.owner, done.taken.job.lane_slot) == ("acme", 0)  # acme's last job, in the slot just freed


def test_a_takeover_in_a_wide_lane_keeps_the_dead_workers_slot(schema, database_url, admin, clock):
    declaration = declare(schema, products(), owner_source=owners(Owner("acme", lane_width=2)))
    with operations_and_slots(declaration, database_url, clock, 4) as (ops, (alive, dead, taker, idle)):
        for n in range(3):
            ops.enqueue("shops", "acme", "products", key=f"acme-{n}")
        kept, lost = alive.take(), dead.take()
        assert (kept.lane_slot, lost.lane_slot) == (0, 1)
        clock.advance(timedelta(minutes=6))
        assert alive.store.renew_lease(kept.id, worker=alive.worker_id, lease=timedelta(minutes=5), now=clock.now)
        taken = taker.take()  # the dead worker's job, in its slot 1; slot 0 is still held
        assert (taken.id, taken.lane_slot) == (lost.id, 1)
        assert idle.take() is None  # and the lane's third job waits for a free slot


def test_a_hand_job_of_a_wide_owner_gets_its_lanes_width(schema, database_url, clock):
    declaration = declare(schema, products(), owner_source=owners(Owner("acme", lane_width=3)))
    with Operations(declaration, declaration.database(database_url), clock=clock) as ops:
        job = ops.enqueue("shops", "acme", "products", key="by-hand")
    assert (job.lane, job.lane_width) == ("acme", 3)


def test_the_slot_index_is_per_queue_so_a_lane_name_in_two_queues_runs_in_both(schema, database_url, clock):
    """Queues shops and imports each have an owner acme (lane acme, 1 wide): each runs its acme job at once."""
    declaration = SyncLane(
        queues=[
            Queue(name, owners=owners("acme"), types=[products()], retry=RetryPolicy(jitter=Jitter.NONE))
            for name in ("shops", "imports")
        ],
        schema=schema,
    )
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as shops,
        WorkerSlot(declaration, database, "imports", clock=clock) as imports,
    ):
        for queue in ("shops", "imports"):
            ops.enqueue(queue, "acme", "products", key="now")
        running = [shops.take(), imports.take()]
    assert [(job.queue, job.lane, job.lane_slot) for job in running] == [("shops", "acme", 0), ("imports", "acme", 0)]
