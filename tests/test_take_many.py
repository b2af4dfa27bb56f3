"""Taking several jobs in one statement (take_many), for a worker process that runs many at once: the jobs
finish_and_take would take one by one, in the same order and by the same lane rules, at most one waiting job a lane
per statement, each leased to a worker id of its own.

Like test_take_order.py, the tests that pick jobs run twice: once where the first look (among the first due jobs of
the queue) finds them, and once behind a head of the queue that is all in one busy lane and longer than that look
reads, so that only the lane walk can find them.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from synclane_provider.core.db.store import Taken
from synclane_provider.core.metrics import LEASE_TAKEOVERS, NO_METRICS, TAKE_WAIT
from synclane_provider.core.run.taking import TakingMany
from tests.support.helpers import Background, execute, race, rows
from tests.support.take_table import ShopsTable, add_job, another_take_holding
from tests.test_metrics import RecordingMetrics

UTC = timezone.utc
NOW = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
LEASE = timedelta(minutes=5)
MOST_WORKERS = 8
"""The most worker ids a test here takes for at once."""
BUSY_HEAD = 32 * MOST_WORKERS + 1
"""Due jobs of one busy lane put at the head of the queue: more than the first look of MOST_WORKERS reads."""


class Table(ShopsTable):
    """An empty jobs table of the queue shops, a way to put rows in it, and takes of it."""

    def __init__(self, schema: str, database_url: str, admin: psycopg.Connection, *, metrics=NO_METRICS) -> None:
        super().__init__(schema, database_url, admin)
        self.taking = TakingMany(self.store, self.declaration.queue("shops"), clock=lambda: NOW, metrics=metrics)

    def add(self, lane: str, **job) -> None:
        """A job of ``lane`` (see :func:`~tests.support.take_table.add_job`)."""
        add_job(self.admin, self.schema, NOW, lane, **job)

    def busy_head(self) -> None:
        """A lane with a running job, and BUSY_HEAD due jobs of it ahead of anything a test adds."""
        self.add("busy", days_ago=0, status="running", running_by="someone-else")
        execute(
            self.admin,
            self.schema,
            "INSERT INTO {jobs} (queue, owner, lane, type, mode, priority, window_start, window_end, dedup_key,"
            " next_run_at) SELECT 'shops', 'busy', 'busy', 'products', 'initial', 0, %s + d * interval '1 day',"
            " %s + (d + 1) * interval '1 day', 'initial:busy:' || d, %s FROM generate_series(1, %s) AS d",
            [NOW, NOW, NOW - timedelta(hours=1), BUSY_HEAD],
        )

    def pause(self, owner: str) -> None:
        execute(
            self.admin,
            self.schema,
            "INSERT INTO {owners} (queue, owner, paused_at, paused_reason, paused_by)"
            " VALUES ('shops', %s, %s, 'a test', 'operator')",
            [owner, NOW],
        )

    def take(self, *workers: str) -> list[tuple]:
        """take_many for ``workers``: each job taken as (lane, days ago, worker, lost worker)."""
        return [described(taken) for taken in self.taking.take(workers)]


def described(taken: Taken) -> tuple:
    job = taken.job
    return (job.lane, (NOW - job.window_end).days, job.leased_by, taken.lost_worker)


def workers(count: int, prefix: str = "w") -> list[str]:
    return [f"{prefix}{n}" for n in range(1, count + 1)]


@pytest.fixture(params=["first look", "lane walk"])
def table(request, schema, database_url, admin):
    made = Table(schema, database_url, admin)
    if request.param == "lane walk":
        made.busy_head()
    yield made
    made.close()


def test_five_workers_over_ten_lanes_get_the_five_best_lanes_heads_in_queue_order_one_each(table, admin, schema):
    for number, lane in enumerate("abcdefghij"):
        table.add(lane, days_ago=10 + number)  # lane a's head is the newest window, lane j's the oldest
        table.add(lane, days_ago=30 + number)
    table.add("j", days_ago=5, type="products")  # an earlier declared type goes before any newer window

    assert table.take(*workers(5)) == [
        ("j", 5, "w1", None),
        ("a", 10, "w2", None),
        ("b", 11, "w3", None),
        ("c", 12, "w4", None),
        ("d", 13, "w5", None),
    ]
    running = rows(admin, schema, "status = 'running' AND lane <> 'busy'")
    assert sorted(r["leased_by"] for r in running) == workers(5)
    assert {(r["lane_slot"], r["attempt_count"], r["lease_expires_at"] - NOW) for r in running} == {(0, 1, LEASE)}


def test_a_lane_two_wide_starts_one_job_a_statement_each_in_a_slot_of_its_own(table, admin, schema):
    for day in (1, 2, 3):
        table.add("wide", days_ago=day, width=2)

    assert table.take(*workers(3)) == [("wide", 1, "w1", None)]
    assert table.take(*workers(3, "x")) == [("wide", 2, "x1", None)]
    assert table.take(*workers(3, "y")) == []  # both slots held: the third job waits
    running = rows(admin, schema, "status = 'running' AND lane = 'wide'", order="lane_slot")
    assert [(r["leased_by"], r["lane_slot"]) for r in running] == [("w1", 0), ("x1", 1)]


def test_a_paused_owners_jobs_are_not_taken_and_its_lane_mates_are(table):
    table.add("shared", days_ago=1, owner="paused")
    table.add("shared", days_ago=2, owner="mate")
    table.add("alone", days_ago=3, owner="paused")
    table.add("other", days_ago=4)
    table.pause("paused")

    assert table.take(*workers(4)) == [("shared", 2, "w1", None), ("other", 4, "w2", None)]


def test_a_lane_with_a_job_running_is_passed_over(table):
    table.add("b", days_ago=0, status="running", running_by="someone-else")
    table.add("b", days_ago=1)
    table.add("b", days_ago=2)
    table.add("c", days_ago=3)

    assert table.take(*workers(3)) == [("c", 3, "w1", None)]


def test_a_deferred_job_waits_behind_the_due_jobs_of_its_lane(table):
    table.add("b", days_ago=1, status="deferred")  # newer, but it used up its regular attempts
    table.add("b", days_ago=30, status="failed")
    table.add("c", days_ago=2, status="deferred")  # nothing else of its lane is due: it goes

    assert table.take(*workers(3)) == [("c", 2, "w1", None), ("b", 30, "w2", None)]
    assert table.take(*workers(3, "x")) == []  # lane b is busy: its deferred job waits until it is idle


def test_an_expired_lease_is_taken_over_first_in_the_slot_it_holds_with_its_lost_worker(table, admin, schema):
    table.add("b", days_ago=9, status="running", running_by="gone", lease_left=-timedelta(minutes=1), width=2)
    execute(admin, schema, "UPDATE {jobs} SET lane_slot = 1 WHERE leased_by = 'gone'")
    table.add("b", days_ago=1, width=2)
    table.add("c", days_ago=2)
    table.add("d", days_ago=3, status="running", running_by="alive")

    assert table.take(*workers(4)) == [("b", 9, "w1", "gone"), ("b", 1, "w2", None), ("c", 2, "w3", None)]
    [taken_over] = rows(admin, schema, "leased_by = 'w1'")
    assert (taken_over["lane_slot"], taken_over["attempt_count"]) == (1, 1)  # its slot, no new attempt counted
    [started] = rows(admin, schema, "leased_by = 'w2'")
    assert started["lane_slot"] == 0  # the lane's free slot, beside the job taken over


def test_a_take_sent_again_after_a_lost_reply_gives_each_worker_back_the_job_it_holds(table):
    for lane in "bcd":
        table.add(lane, days_ago=1)
    first = table.take("w1", "w2")
    assert first == [("b", 1, "w1", None), ("c", 1, "w2", None)]

    table.add("e", days_ago=2, status="running", running_by="gone", lease_left=-timedelta(minutes=1))

    assert table.take("w1", "w2") == first  # the same jobs, to the same workers, before any lease that expired
    assert table.take("new", "w2") == [("e", 2, "new", "gone"), ("c", 1, "w2", None)]


def test_a_lane_whose_head_another_take_holds_is_passed_over_whole(table, admin, schema):
    """Another worker's take holds lane b's newest window (it may yet lose its race for the lane and hand it
    back): the take goes on to the other lanes, never to lane b's next window, which would then start first."""
    for day in (1, 2, 3):
        table.add("b", days_ago=day)
    table.add("c", days_ago=5)

    with another_take_holding(admin, schema, NOW, "b", days_ago=1):
        assert table.take(*workers(3)) == [("c", 5, "w1", None)]
    assert table.take(*workers(3, "x")) == [("b", 1, "x1", None)]


def test_heads_before_and_behind_a_long_busy_stretch_are_taken_together_in_queue_order(schema, database_url, admin):
    """The first look finds the lanes' heads ahead of the busy stretch, the lane walk the ones behind it: never the
    same lane twice, and in queue order across both."""
    table = Table(schema, database_url, admin)
    try:
        table.busy_head()
        execute(admin, schema, "UPDATE {jobs} SET priority = 1 WHERE lane = 'busy'")  # behind products, before orders
        table.add("a", days_ago=2, type="products")
        table.add("b", days_ago=1, type="products")
        table.add("a", days_ago=3)
        for lane in "cde":
            table.add(lane, days_ago=4)

        assert table.take(*workers(MOST_WORKERS)) == [
            ("b", 1, "w1", None),
            ("a", 2, "w2", None),
            ("c", 4, "w3", None),
            ("d", 4, "w4", None),
            ("e", 4, "w5", None),
        ]
    finally:
        table.close()


@pytest.mark.parametrize("seed", range(8))
def test_take_many_takes_the_jobs_as_many_single_takes_in_a_row_would(schema, database_url, admin, seed):
    """On the same rows (lanes one wide, owners paused, jobs deferred, failed, not yet due, running, with leases
    expired), take_many for n workers leases the very jobs that n finish_and_take takes in a row lease, the i-th
    to the i-th worker, in the same slots; half the seeds behind a busy head of the queue (the lane walk)."""
    chooser = random.Random(seed)
    lanes = [f"lane-{n}" for n in range(14)]
    jobs = []
    for number, lane in enumerate(lanes):
        if chooser.random() < 0.25:
            expired = chooser.random() < 0.6
            jobs.append(
                dict(
                    lane=lane,
                    days_ago=number,
                    status="running",
                    running_by=f"lost-{number}",
                    lease_left=timedelta(minutes=-(number + 1) if expired else 10),  # none expire together
                )
            )
        for day in chooser.sample(range(40), chooser.randint(0, 4)):
            jobs.append(
                dict(
                    lane=lane,
                    days_ago=day,
                    status=chooser.choice(["pending", "pending", "failed", "deferred"]),
                    type=chooser.choice(["orders", "orders", "products"]),
                    owner=chooser.choice([lane, f"{lane}-eu", "paused"]),
                    due_in=chooser.choice([-timedelta(hours=1)] * 4 + [timedelta(hours=1)]),
                )
            )
    asked = workers(chooser.randint(3, MOST_WORKERS))

    def prepare() -> Table:
        execute(admin, schema, "TRUNCATE {jobs}, {owners} RESTART IDENTITY")
        fresh = Table(schema, database_url, admin)
        if seed % 2:
            fresh.busy_head()
        for job in jobs:
            fresh.add(**job)
        fresh.pause("paused")
        return fresh

    def running() -> list[tuple]:
        return [
            (r["id"], r["leased_by"], r["lane_slot"], r["attempt_count"])
            for r in rows(admin, schema, "status = 'running' AND leased_by LIKE 'w%%'")
        ]

    table = prepare()
    try:
        together = [
            (t.job.id, t.job.leased_by, t.lost_worker)
            for t in table.store.take_many(queue="shops", workers=asked, lease=LEASE, now=NOW)
        ]
        by_take_many = running()
    finally:
        table.close()
    table = prepare()
    try:
        one_by_one = []
        for worker in asked:
            taken = table.store.finish_and_take(
                queue="shops", worker=worker, lease=LEASE, finish=None, take=True, now=NOW
            ).taken
            if taken is not None:
                one_by_one.append((taken.job.id, taken.job.leased_by, taken.lost_worker))
        by_single_takes = running()
    finally:
        table.close()

    assert together == one_by_one and by_take_many == by_single_takes
    assert len(together) > 0


def test_two_processes_taking_at_once_never_put_two_jobs_in_one_lane_slot(schema, database_url, admin):
    """Round after round, two worker processes take for four workers each at the same moment, while newer jobs
    arrive ahead of the lanes' heads (so that takes that read a lane before an arrival and after it see other
    heads); then every job taken completes. No lane slot is ever held twice, no lane runs wider than its width,
    no job is taken twice, and what a lost race raises never leaves the take."""
    race = take_many_in_rounds(schema, database_url, admin, rounds=300)
    assert race.doubled == []
    assert race.taken and max(race.taken.values()) == 1
    assert sum(race.taken.values()) > 300  # both took, round after round


def test_without_the_slot_index_the_same_race_puts_two_jobs_in_one_lane_slot(schemas, database_url, admin):
    """The check can fail: the index is what holds a lane's slots against takes that read the lane at different
    moments. A race is a race: it runs again, up to three times, until a slot is seen held twice."""
    for _ in range(3):
        race = take_many_in_rounds(schemas(), database_url, admin, rounds=100, keep_lane_index=False)
        if race.doubled:
            break
    assert race.doubled


@dataclass
class TakenInRounds:
    taken: Counter[int] = field(default_factory=Counter)
    """How many times each job was taken."""
    doubled: list[tuple[int, str, int]] = field(default_factory=list)
    """(round, lane, slot) of each slot that two jobs taken in one round held."""


def take_many_in_rounds(
    schema: str, database_url: str, admin: psycopg.Connection, *, rounds: int, keep_lane_index: bool = True
) -> TakenInRounds:
    """Two processes take for four workers each at once, while one newer job arrives in each of six lanes two
    wide, round after round; every job taken completes before the next round."""
    lanes, width = 6, 2
    first, second = Table(schema, database_url, admin), Table(schema, database_url, admin)
    if not keep_lane_index:
        admin.execute(sql.SQL("DROP INDEX {}.jobs_one_running_per_lane_slot").format(sql.Identifier(schema)))
    arrivals = psycopg.connect(database_url, autocommit=True)
    found = TakenInRounds()
    try:
        for number in range(lanes * 3):
            first.add(f"lane-{number % lanes}", days_ago=1000 + number, width=width)

        def arrive() -> None:
            execute(
                arrivals,
                schema,
                "INSERT INTO {jobs} (queue, owner, lane, lane_width, type, mode, priority, window_end, dedup_key,"
                " next_run_at) SELECT 'shops', 'lane-' || n, 'lane-' || n, %s, 'orders', 'manual', 1,"
                " clock_timestamp(), 'manual:' || gen_random_uuid(), %s FROM generate_series(0, %s) AS n",
                [width, NOW - timedelta(hours=1), lanes - 1],
            )

        for round_number in range(rounds):
            by_first, by_second, _ = race(
                [
                    lambda: first.taking.take(workers(4, f"r{round_number}-a")),
                    lambda: second.taking.take(workers(4, f"r{round_number}-b")),
                    arrive,
                ]
            )
            slots = Counter((t.job.lane, t.job.lane_slot) for t in by_first + by_second)
            found.doubled += [(round_number, lane, slot) for (lane, slot), times in slots.items() if times > 1]
            found.taken.update(t.job.id for t in by_first + by_second)
            execute(
                admin,
                schema,
                "UPDATE {jobs} SET status = 'completed', leased_by = NULL, lease_expires_at = NULL,"
                " completed_at = %s WHERE status = 'running'",
                [NOW],
            )
    finally:
        arrivals.close()
        first.close()
        second.close()
    return found


def test_a_lost_lane_race_takes_nothing_and_is_taken_again_for_half_the_workers(schema, database_url, admin):
    """Another worker's take, not yet committed, holds lane b's slot with a job behind its head (it read the lane
    before the head arrived): take_many picks the head for that slot, waits on the index, and loses when the other
    commits. The statement took nothing; the take is sent again for half the workers, and lane b is busy then."""
    table = Table(schema, database_url, admin)
    try:
        table.add("b", days_ago=1)
        table.add("b", days_ago=2)
        for lane in "cdef":
            table.add(lane, days_ago=3)
        with psycopg.connect(database_url) as other:
            execute(
                other,
                schema,
                "UPDATE {jobs} SET status = 'running', leased_by = 'other', lease_expires_at = %s"
                " WHERE lane = 'b' AND window_end = %s",
                [NOW + LEASE, NOW - timedelta(days=2)],
            )
            taking = Background(lambda: table.take(*workers(4)), name="take-many")
            waiting_on_the_index(admin, schema)
            other.commit()
            assert taking.result() == [("c", 3, "w1", None), ("d", 3, "w2", None)]
        assert table.taking.summary.lane_races == 1
    finally:
        table.close()


def waiting_on_the_index(admin: psycopg.Connection, schema: str, timeout: float = 30.0) -> None:
    """Until a statement on ``schema``'s jobs waits for another transaction (take_many, on its index entry)."""
    deadline = time.monotonic() + timeout
    while not admin.execute(
        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'transactionid'"
        " AND query LIKE %s",
        [f"%{schema}%"],
    ).fetchall():
        assert time.monotonic() < deadline, "no take waited on the other worker's lane slot"
        time.sleep(0.01)


def test_takes_are_counted_as_a_slots_takes_are(schema, database_url, admin):
    metrics = RecordingMetrics()
    table = Table(schema, database_url, admin, metrics=metrics)
    try:
        table.add("b", days_ago=9, status="running", running_by="gone", lease_left=-timedelta(minutes=1))
        table.add("c", days_ago=2, due_in=-timedelta(minutes=30))
        table.add("d", days_ago=3, due_in=-timedelta(minutes=10))
        assert len(table.take(*workers(3))) == 3
        assert table.take(*workers(3, "x")) == []
    finally:
        table.close()
    assert metrics.total(LEASE_TAKEOVERS, queue="shops", type="orders") == 1
    assert sorted(metrics.values(TAKE_WAIT)) == [600.0, 1800.0]  # from due to taken, each waiting job
    assert (table.taking.summary.empty_takes, table.taking.summary.lane_races) == (1, 0)
