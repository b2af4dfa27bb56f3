"""The lane race: many workers, few lanes, and every job's run interval recorded to count overlaps.

Used by the test suite (which needs zero overlaps with the lane index and
some without it, to prove the check can fail) and by ``bench/lanes.py``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg import sql

from synclane_provider.core import Job, Operations, Page, Queue, SnapshotType, SyncLane, WorkerPool


@dataclass(frozen=True)
class RaceResult:
    jobs: int
    overlaps: int
    seconds: float
    lane_races: int


def count_overlaps(intervals: dict[str, list[tuple[float, float]]]) -> int:
    """Pairs of intervals in one lane that overlap in time (each later one counted against all earlier)."""
    overlaps = 0
    for spans in intervals.values():
        spans = sorted(spans)
        for i, (start, _) in enumerate(spans):
            overlaps += sum(1 for earlier_start, earlier_end in spans[:i] if earlier_end > start)
    return overlaps


def lane_race(
    database_url: str,
    schema: str,
    *,
    workers: int = 24,
    lanes: int = 3,
    jobs: int = 600,
    page_seconds: float = 0.002,
    keep_lane_index: bool = True,
) -> RaceResult:
    """Drain ``jobs`` jobs spread over ``lanes`` lanes with ``workers`` slots; count lane overlaps."""
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
    with psycopg.connect(database_url, autocommit=True) as conn:
        if not keep_lane_index:
            conn.execute(sql.SQL("DROP INDEX {}.jobs_one_running_per_lane").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (queue, owner, lane, type, mode, dedup_key) "
                "SELECT 'race', 'owner-' || i, 'lane-' || (i %% %s), 'work', 'manual', 'manual:' || i "
                "FROM generate_series(1, %s) AS i"
            ).format(sql.Identifier(schema)),
            [lanes, jobs],
        )
    ops.close()
    pool = WorkerPool(synclane, database, "race", slots=workers, poll_interval=timedelta(milliseconds=50))
    started = time.perf_counter()
    summary = pool.drain()
    seconds = time.perf_counter() - started
    pool.close()
    done = sum(len(spans) for spans in intervals.values())
    return RaceResult(jobs=done, overlaps=count_overlaps(intervals), seconds=seconds, lane_races=summary.lane_races)
