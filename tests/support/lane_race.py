"""The lane race: many workers, few lanes, and every job's run interval recorded to count overlaps.

Used by the test suite (which needs zero overlaps with the lane index and
some without it, to prove the check can fail) and by ``bench/lanes.py``.
Also slots taking at once round after round, and the jobs a lane started out of its order.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg
from psycopg import sql

from synclane_provider.core import (
    Job,
    JobStatus,
    Operations,
    Page,
    Queue,
    SnapshotType,
    SyncLane,
    WorkerPool,
    WorkerSlot,
)
from synclane_provider.core.db.store import Finish
from tests.support.helpers import race, rows


@dataclass(frozen=True)
class RaceResult:
    jobs: int
    overlaps: int
    """Pairs of jobs of one lane that ran at the same time (0 is the guarantee for lanes of width 1)."""
    seconds: float
    lane_races: int
    max_running: dict[str, int] = field(default_factory=dict)
    """Per lane, the most jobs seen running at one instant (at most the width is the guarantee)."""

    @property
    def max_running_per_lane(self) -> int:
        return max(self.max_running.values(), default=0)


def count_overlaps(intervals: dict[str, list[tuple[float, float]]]) -> int:
    """Pairs of intervals in one lane that overlap in time (each later one counted against all earlier)."""
    overlaps = 0
    for spans in intervals.values():
        spans = sorted(spans)
        for i, (start, _) in enumerate(spans):
            overlaps += sum(1 for earlier_start, earlier_end in spans[:i] if earlier_end > start)
    return overlaps


def max_concurrency(intervals: dict[str, list[tuple[float, float]]]) -> dict[str, int]:
    """Per lane, the most intervals open at one instant (an interval ending when another starts does not count)."""
    most: dict[str, int] = {}
    for lane, spans in intervals.items():
        # Ends sort before starts at the same instant: [0, 1) and [1, 2) never ran together.
        events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
        running = peak = 0
        for _, step in events:
            running += step
            peak = max(peak, running)
        most[lane] = peak
    return most


def lane_race(
    database_url: str,
    schema: str,
    *,
    workers: int = 24,
    lanes: int = 3,
    jobs: int = 600,
    waves: int = 10,
    page_seconds: float = 0.002,
    keep_lane_index: bool = True,
    width: int = 1,
    arrivals: int = 1,
    jobs_per_slot: int = 1,
) -> RaceResult:
    """Run ``jobs`` jobs spread over ``lanes`` lanes of ``width`` through ``workers`` slots of ``jobs_per_slot``
    jobs each; count lane overlaps.

    The jobs arrive in ``waves``: each wave is inserted while every slot is
    idle, then all slots are woken at once -- the moment every lane is free
    and every worker asks for a job together, as deferred Airflow workers do
    when one NOTIFY reaches all their triggers. Between waves the queue drains.

    With ``arrivals`` above 1 a wave comes in that many inserts, one after the other while the slots take, each
    newer than the one before (a later window end), so it goes ahead of what waits: takes that read the table
    before an insert and takes that read it after see different heads of one lane, which only the lane index
    keeps from running side by side.
    """
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    lock = threading.Lock()

    def handler(job: Job) -> Page:
        started = time.perf_counter()
        time.sleep(page_seconds)
        with lock:
            intervals[job.lane].append((started, time.perf_counter()))
        return Page(None, 1)

    synclane = SyncLane(
        queues=[Queue("race", owners=lambda queue: [], types=[SnapshotType("work", handler, every=timedelta(days=1))])],
        schema=schema,
    )
    database = synclane.database(database_url)
    ops = Operations(synclane, database)
    ops.activity("race")  # creates the schema
    admin = psycopg.connect(database_url, autocommit=True)
    if not keep_lane_index:
        admin.execute(sql.SQL("DROP INDEX {}.jobs_one_running_per_lane_slot").format(sql.Identifier(schema)))
    # Only wake() starts the slots on a wave: their own polls are far apart.
    pool = WorkerPool(
        synclane, database, "race", slots=workers, jobs_per_slot=jobs_per_slot, poll_interval=timedelta(seconds=30)
    )
    outcome: list = []  # the pool's summary, or what it raised

    def run_pool() -> None:
        try:
            outcome.append(pool.run())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome.append(exc)

    working = threading.Thread(target=run_pool, name="lane-race-pool")
    started = time.perf_counter()
    working.start()
    try:
        time.sleep(0.5)  # every slot connects, finds nothing and goes idle
        per_wave = -(-jobs // waves)
        per_arrival = -(-per_wave // arrivals)
        for wave in range(1, jobs + 1, per_wave):
            for first in range(wave, min(wave + per_wave, jobs + 1), per_arrival):
                admin.execute(
                    sql.SQL(
                        "INSERT INTO {}.jobs (queue, owner, lane, lane_width, type, mode, window_end, dedup_key) "
                        "SELECT 'race', 'owner-' || i, 'lane-' || (i %% %s), %s, 'work', 'manual', clock_timestamp(),"
                        " 'manual:' || i FROM generate_series(%s::int, %s::int) AS i"
                    ).format(sql.Identifier(schema)),
                    [lanes, width, first, min(first + per_arrival - 1, wave + per_wave - 1, jobs)],
                )
                pool.wake()
            while working.is_alive() and not ops.activity("race").drained:
                time.sleep(0.01)
    finally:
        pool.shutdown()
        working.join()
        pool.close()
        ops.close()
        admin.close()
    seconds = time.perf_counter() - started
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    done = sum(len(spans) for spans in intervals.values())
    return RaceResult(
        jobs=done,
        overlaps=count_overlaps(intervals),
        seconds=seconds,
        lane_races=outcome[0].lane_races,
        max_running=max_concurrency(intervals),
    )


def take_in_rounds(slots: list[WorkerSlot]) -> int:
    """Every slot takes at once (released by a barrier), then each completes what it took; round after round
    until no slot finds a job. Returns the rounds that took something."""
    rounds = 0
    while True:
        taken = race(slot.take for slot in slots)
        if not any(taken):
            return rounds
        rounds += 1
        for slot, job in zip(slots, taken):
            if job is not None:
                done = slot.store.finish_and_take(
                    queue=job.queue,
                    worker=slot.worker_id,
                    lease=timedelta(minutes=5),
                    finish=Finish(job.id, JobStatus.COMPLETED, 0),
                    take=False,
                    now=None,
                )
                assert done.finished


def overtaken(conn: psycopg.Connection, schema: str) -> list[int]:
    """The jobs that started after a job behind them in their lane's line (declared type, newest window first) had
    completed, read from the rows (started_at is stamped by the take's own clock_timestamp()). In a lane one wide
    that is any job started out of its order; in a wider lane, jobs of one line may start together in any order."""
    late = []
    for lane in {row["lane"] for row in rows(conn, schema)}:
        line = rows(conn, schema, "lane = %s", [lane], order="priority, window_end DESC NULLS LAST, id")
        for place, job in enumerate(line):
            if any(
                behind["completed_at"] is not None and job["started_at"] > behind["completed_at"]
                for behind in line[place + 1 :]
            ):
                late.append(job["id"])
    return late
