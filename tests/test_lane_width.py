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
from tests.support.lane_race import lane_race, max_concurrency, overtaken, take_in_rounds

HARSH = {"waves": 20, "page_seconds": 0.02, "arrivals": 10}
"""Twenty moments when every worker asks at once, each wave arriving in ten inserts while they take (so takes see
different heads of a lane), and pages long enough that a slot taken twice is seen running beside the lane's other
slot: without the index the race then shows every time (measured: 3 at once)."""


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


@pytest.mark.parametrize(("workers", "jobs_per_slot"), [(24, 1), (3, 8)], ids=["one job a slot", "8 jobs a slot"])
def test_24_workers_on_3_lanes_of_width_2_run_at_most_2_jobs_of_a_lane_at_once(
    database_url, fresh_schema, workers, jobs_per_slot
):
    result = lane_race(
        database_url, fresh_schema, workers=workers, jobs_per_slot=jobs_per_slot, lanes=3, jobs=600, width=2, **HARSH
    )
    assert result.jobs == 600
    assert result.max_running == {"lane-0": 2, "lane-1": 2, "lane-2": 2}  # the width is used, and never passed


def test_without_the_slot_index_the_same_race_runs_a_lane_wider_than_2(database_url, schemas):
    """The check can fail: the index is what holds the width. A race is a race: on a loaded machine one may pass
    without an overlap, so it runs again, up to three times, until the check is seen failing."""
    for _ in range(3):
        result = lane_race(
            database_url, schemas(), workers=24, lanes=3, jobs=600, width=2, keep_lane_index=False, **HARSH
        )
        assert result.jobs == 600
        if result.max_running_per_lane > 2:
            break
    assert result.max_running_per_lane > 2


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
        assert alive.store.renew_leases([(kept.id, alive.worker_id, timedelta(minutes=5))], now=clock.now)
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


def test_a_take_goes_past_a_held_job_of_a_wide_lane_only_to_another_of_its_free_slots(
    schema, database_url, admin, clock
):
    """acme is 2 wide; another worker's take holds the first job of its line. With both slots free the second job
    may start beside it, in the slot the first one's take does not ask for; with one slot free, the second job's
    turn has not come: it would start before the first, which may yet lose its race and wait for a slot."""
    declaration = declare(schema, products(), owner_source=owners(Owner("acme", lane_width=2)))
    with operations_and_slots(declaration, database_url, clock, 3) as (ops, (first, second, third)):
        line = [ops.enqueue("shops", "acme", "products", key=f"acme-{n}") for n in range(4)]
        with admin.transaction():
            admin.execute(
                sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE").format(sql.Identifier(schema)), [line[0].id]
            )
            beside = first.take()
            assert (beside.id, beside.lane_slot) == (line[1].id, 1)
            assert second.take() is None  # one slot free: line[0]'s, and line[2] is not next
        held = second.take()
        assert (held.id, held.lane_slot) == (line[0].id, 0)

        assert first.store.release(beside.id, worker=first.worker_id, processed_count=0, now=clock.now)
        with admin.transaction():  # line[0] runs; line[1] is first in line for the one free slot
            admin.execute(
                sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE").format(sql.Identifier(schema)), [line[1].id]
            )
            assert third.take() is None
        assert third.take().id == line[1].id


def test_racing_takes_in_wide_lanes_never_leave_a_job_behind_a_later_one(schema, database_url, admin):
    """Six slots take at once, round after round, on two lanes 2 wide: each round starts the first two jobs of each
    lane's line, whichever slot's take gets there first, and no job starts after one behind it has completed."""
    declaration = declare(
        schema,
        orders(horizon=timedelta(days=60), slice=timedelta(days=1)),
        owner_source=owners(Owner("acme", lane_width=2), Owner("globex", lane_width=2)),
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    with ExitStack() as stack:
        slots = [stack.enter_context(WorkerSlot(declaration, database, "shops")) for _ in range(6)]
        assert take_in_rounds(slots) == -(-len(rows(admin, schema)) // 4)  # two jobs of each lane a round
    assert {row["status"] for row in rows(admin, schema)} == {"completed"}
    assert overtaken(admin, schema) == []


def test_in_a_wide_lane_a_deferred_job_stands_behind_the_rest_of_the_line(schema, database_url, admin, clock):
    """acme is 2 wide and its first job is deferred: the two jobs behind it start, in slots 0 and 1, and it waits
    for the lane to be otherwise idle."""
    declaration = declare(schema, products(), owner_source=owners(Owner("acme", lane_width=2)))
    with operations_and_slots(declaration, database_url, clock, 3) as (ops, (first, second, third)):
        deferred, *rest = [ops.enqueue("shops", "acme", "products", key=f"acme-{n}") for n in range(3)]
        admin.execute(
            sql.SQL("UPDATE {}.jobs SET status = 'deferred' WHERE id = %s").format(sql.Identifier(schema)),
            [deferred.id],
        )
        taken = [first.take(), second.take()]
        assert [(job.id, job.lane_slot) for job in taken] == [(rest[0].id, 0), (rest[1].id, 1)]
        assert third.take() is None
