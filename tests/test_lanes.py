"""One running job per lane, across every worker: proven by racing 24 workers on 3 lanes."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import timedelta

import pytest

from synclane_provider.core import Job, Operations, Owner, Page, WorkerPool
from tests.support.helpers import Background, declare, orders, rows
from tests.support.lane_race import count_overlaps, lane_race


def test_the_overlap_check_counts_overlapping_intervals():
    assert count_overlaps({"a": [(0, 1), (1, 2), (2, 3)], "b": [(0, 5)]}) == 0
    assert count_overlaps({"a": [(0, 2), (1, 3), (2.5, 4)]}) == 2


HARSH = {"waves": 20, "page_seconds": 0.02, "arrivals": 10}
"""Twenty moments when every worker asks at once, each wave arriving in ten inserts while the workers take, each
newer than the last: a take that read the table before an insert and one that read it after see different heads
of a lane. The take's own look never starts a job below a lane's head, nor in a lane it saw busy; only the index
stops two takes that saw the lane at different moments (measured without it: 4-15 overlaps a run)."""


SHAPES = pytest.mark.parametrize(
    ("workers", "jobs_per_slot"), [(24, 1), (3, 8)], ids=["24 slots of one job", "3 slots of 8 jobs"]
)
"""24 workers: as many one-job slots, or three slots running eight jobs each."""


@SHAPES
def test_24_workers_on_3_lanes_never_run_two_jobs_of_one_lane_at_once(
    database_url, fresh_schema, workers, jobs_per_slot
):
    result = lane_race(
        database_url, fresh_schema, workers=workers, jobs_per_slot=jobs_per_slot, lanes=3, jobs=600, **HARSH
    )
    assert result.jobs == 600
    assert result.overlaps == 0


@SHAPES
def test_without_the_lane_index_the_same_race_overlaps(database_url, schemas, workers, jobs_per_slot):
    """The check can fail: the index is what prevents this. A race is a race: on a loaded machine one may pass
    without an overlap, so it runs again, up to three times, until the check is seen failing."""
    for _ in range(3):
        result = lane_race(
            database_url,
            schemas(),
            workers=workers,
            jobs_per_slot=jobs_per_slot,
            lanes=3,
            jobs=600,
            keep_lane_index=False,
            **HARSH,
        )
        assert result.jobs == 600
        if result.overlaps > 0:
            break
    assert result.overlaps > 0


def test_an_owner_moved_into_a_shared_lane_never_runs_beside_it(database_url, fresh_schema, admin):
    """acme-us starts with a lane of its own and joins acme's while six workers drain both owners and a
    planner re-plans in a loop: from then on no two jobs of lane acme ever run at once."""
    lanes = {"acme-us": "acme-us", "acme-eu": "acme"}
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    lock = threading.Lock()

    def handler(job: Job) -> Page:
        started = time.perf_counter()
        time.sleep(0.004)
        with lock:
            intervals[job.lane].append((started, time.perf_counter()))
            runs.append((job.owner, job.lane, started))
        return Page(None, 1)

    runs: list[tuple[str, str, float]] = []
    declaration = declare(
        fresh_schema,
        orders(handler, horizon=timedelta(days=120), slice=timedelta(days=1)),
        owner_source=lambda queue: [Owner(owner, lane=lane) for owner, lane in lanes.items()],
    )
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
        pool = WorkerPool(declaration, database, "shops", slots=6, poll_interval=timedelta(seconds=0.05))
        working = Background(pool.drain, name="pool")
        while len(runs) < 40:
            assert working.is_alive()
            time.sleep(0.005)
        lanes["acme-us"] = "acme"
        summary = ops.plan("shops")
        planned_again = time.perf_counter()
        replans = 0
        while working.is_alive():
            replans += ops.plan("shops").total == 0
            time.sleep(0.01)
        done = working.result()

    assert summary.moved > 0
    assert replans > 0
    assert done.outcomes == {"completed": len(rows(admin, fresh_schema))}  # every slice, and each recurring window
    assert count_overlaps(intervals) == 0
    after = [(lane, started) for owner, lane, started in runs if owner == "acme-us" and started > planned_again]
    assert after and {lane for lane, _ in after} == {"acme"}
