"""Scale-out on Airflow's CeleryExecutor with real processes: the API server, scheduler, DAG processor and
triggerer, and two Celery workers standing for two machines (``celery-1``, ``celery-2``), Redis as the
broker, a metadata database and a jobs schema of the test's own.

One scenario runs once for the module; each test asserts one promise about it:

1. 120 jobs over 8 lanes, 6 pages each, every page waiting 0.4 s on a slow API that logs it; a 15-second
   lease; the worker DAG's 4 mapped slots start, spread over both Celery workers;
2. once jobs have completed and both workers are mid-job, the worker holding a job mid-way is SIGKILLed
   with every process it started (Celery's main process, its pool, the task runners);
3. the scenario waits until every job completed and the worker DAG's run ended.

Rows are sampled several times a second throughout, and the task instances every second.
"""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from tests.support.celery_cluster import WORK_DAG, CeleryCluster, RedisUnavailable, find_redis
from tests.support.celery_workload import RECORDS_PER_PAGE, Workload, lane_overlaps
from tests.support.real_airflow import Sampler

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]

PAGES = 6
LEASE = 15.0
SLOTS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Redis for Celery. Missing, it fails the run under CI=true or when $SYNCLANE_TEST_REDIS_URL names it, and
    skips the test elsewhere."""
    try:
        found = find_redis(tmp_path_factory.mktemp("redis"))
    except RedisUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true" or os.environ.get("SYNCLANE_TEST_REDIS_URL"):
            pytest.fail(f"no Redis for the Celery test: {exc}", pytrace=False)
        pytest.skip(f"no Redis for the Celery test: {exc}")
    yield found
    found.close()


@dataclass
class Scenario:
    workload: Workload
    cluster: CeleryCluster
    planned: int = 0
    victim: str = ""
    survivor: str = ""
    killed_pids: set[int] = field(default_factory=set)
    killed_at: datetime | None = None
    held_at_kill: list[dict] = field(default_factory=list)
    """The victim's running jobs as the table had them right after the kill."""
    instances_at_kill: list[dict] = field(default_factory=list)
    members_at_kill: dict[str, list[int]] = field(default_factory=dict)
    observed: list[tuple[float, list[dict]]] = field(default_factory=list)
    """(seconds after start, the worker DAG's task instances), about once a second."""
    tries: dict[int, list[dict]] = field(default_factory=dict)
    run: dict = field(default_factory=dict)
    final: list[dict] = field(default_factory=list)
    pages: list[dict] = field(default_factory=list)
    samples: list[list[dict]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def worker_of(leased_by: str | None, members: dict[str, list[int]]) -> str | None:
    """Which Celery worker's process holds a lease (``leased_by`` is ``host:pid:label:random``)."""
    if not leased_by:
        return None
    pid = int(leased_by.split(":")[1])
    return next((name for name, pids in members.items() if pid in pids), None)


@pytest.fixture(scope="module")
def scenario(database_url, broker, tmp_path_factory, airflow_metadata):
    started = time.monotonic()
    home = tmp_path_factory.mktemp("celery")
    workload = Workload(
        schema=f"synclane_celery_{uuid.uuid4().hex[:8]}",
        database_url=database_url,
        owners=120,
        lanes=8,
        pages=PAGES,
        latency=0.4,
        slots=SLOTS,
        lease=LEASE,
    )
    cluster = CeleryCluster(
        database_url,
        broker.url,
        workload,
        home,
        workers=2,
        concurrency=3,
        idle_timeout=15,
        migrated_metadata=airflow_metadata,
    )
    run = Scenario(workload, cluster)
    sampler = Sampler(database_url, workload.schema)
    run.samples = sampler.samples
    try:
        run.planned = workload.prepare()
        sampler.start()
        cluster.start()
        run.timings["cluster healthy"] = time.monotonic() - started
        cluster.unpause()

        def instances() -> list[dict]:
            runs = cluster.api.runs(WORK_DAG)
            if not runs:
                return []
            run.run = runs[-1]  # the first run: the one whose tasks the kill hits
            found = [
                ti for ti in cluster.api.task_instances(WORK_DAG, run.run["dag_run_id"]) if ti["task_id"] == "work"
            ]
            run.observed.append((time.monotonic() - started, found))
            return found

        # 1-2. Jobs completed, slots running on both workers, one of them mid-way through a job: kill its worker.
        def moment_to_kill():
            tis = instances()
            if len({ti["hostname"] for ti in tis if ti["state"] == "running"}) < 2:
                return None
            jobs = workload.jobs()
            if sum(job["status"] == "completed" for job in jobs) < 8:
                return None
            members = {name: cluster.worker(name).members() for name in cluster.hostnames}
            for job in jobs:
                if job["status"] == "running" and 1 <= int(job["cursor"] or 0) <= PAGES - 2:
                    holder = worker_of(job["leased_by"], members)
                    if holder is not None:
                        return holder, members, tis
            return None

        run.victim, run.members_at_kill, run.instances_at_kill = cluster.wait(
            moment_to_kill, 150, "jobs mid-way on both workers", every=0.2
        )
        run.survivor = next(name for name in cluster.hostnames if name != run.victim)
        run.killed_pids = set(cluster.kill_worker(run.victim))
        run.killed_at = datetime.now().astimezone()
        run.timings["killed"] = time.monotonic() - started
        run.held_at_kill = [
            job
            for job in workload.jobs()
            if job["status"] == "running" and int(job["leased_by"].split(":")[1]) in run.killed_pids
        ]

        # 3. Every job completes; the lost task instances are dealt with and the run ends.
        cluster.wait(
            lambda: instances() and all(job["status"] == "completed" for job in workload.jobs()),
            240,
            "every job completed",
        )
        run.timings["all completed"] = time.monotonic() - started
        cluster.wait(
            lambda: instances() and run.run["state"] in ("success", "failed"), 240, "the worker DAG run to end", every=1
        )
        run.timings["run ended"] = time.monotonic() - started
        run_id = urllib.parse.quote(run.run["dag_run_id"], safe="")
        for ti in run.observed[-1][1]:
            path = f"/api/v2/dags/{WORK_DAG}/dagRuns/{run_id}/taskInstances/work/{ti['map_index']}/tries"
            run.tries[ti["map_index"]] = cluster.api.get(path)["task_instances"]
        run.final = workload.jobs()
        run.pages = workload.served()
        sampler.stop()
        yield run
    finally:
        try:
            cluster.close()
            sampler.stop()
        finally:
            workload.drop()
            print(report(run))


def report(run: Scenario) -> str:
    """What happened, for ``pytest -s`` and the figures of docs/how-to/scale-out.md: timings, and what followed the kill."""
    lines = [
        f"\nCelery scale-out timings (s): { {k: round(v) for k, v in run.timings.items()} }",
        f"killed {run.victim} ({len(run.killed_pids)} processes) holding jobs (id, cursor) "
        f"{[(job['id'], job['cursor']) for job in run.held_at_kill]}",
    ]
    if run.killed_at is None:
        return "\n".join(lines)
    for held in run.held_at_kill:
        resumed = [page for page in run.pages if page["job_id"] == held["id"] and page["served_at"] > run.killed_at]
        if resumed:
            lines.append(
                f"job {held['id']}: lease ran out {(held['lease_expires_at'] - run.killed_at).total_seconds():.1f}s "
                f"after the kill; {resumed[0]['served_by']} asked for cursor {resumed[0]['cursor']} "
                f"{(resumed[0]['served_at'] - run.killed_at).total_seconds():.1f}s after it"
            )
    killed = run.timings["killed"]
    lost = {
        ti["map_index"] for ti in run.instances_at_kill if ti["state"] == "running" and ti["hostname"] == run.victim
    }
    for map_index in sorted(lost):
        seen: dict[str, float] = {}
        for at, tis in run.observed:
            for ti in tis:
                if ti["map_index"] == map_index and at > killed:
                    seen.setdefault(f"{ti['state']} (try {ti['try_number']}, {ti['hostname'] or '-'})", at - killed)
        lines.append(
            f"slot {map_index} after the kill: " + ", ".join(f"{state} at {at:.0f}s" for state, at in seen.items())
        )
    return "\n".join(lines)


# -- the promises ----------------------------------------------------------------------------------------


def test_the_worker_dags_mapped_slots_ran_on_both_celery_workers(scenario):
    running = [ti for ti in scenario.instances_at_kill if ti["state"] == "running"]
    assert sorted(ti["map_index"] for ti in scenario.instances_at_kill) == list(range(SLOTS))
    assert {ti["hostname"] for ti in running} == {"celery-1", "celery-2"}
    # The host name Airflow shows is the worker whose processes ran the task, and the pages were asked by both.
    for ti in running:
        assert ti["pid"] in scenario.members_at_kill[ti["hostname"]], ti
    before = [page for page in scenario.pages if page["served_at"] < scenario.killed_at]
    assert {page["served_by"] for page in before} == {"celery-1", "celery-2"}


def test_the_killed_workers_jobs_were_taken_over_after_their_lease_from_their_cursors(scenario):
    assert scenario.held_at_kill, "the killed worker held no job"
    final = {job["id"]: job for job in scenario.final}
    served = defaultdict(list)
    for page in scenario.pages:
        served[page["job_id"]].append(page)
    for held in scenario.held_at_kill:
        job = final[held["id"]]
        assert job["status"] == "completed" and job["attempt_count"] == 2, job
        after = [page for page in served[held["id"]] if page["served_at"] > scenario.killed_at]
        assert after and all(page["served_by"] == scenario.survivor for page in after)
        # The taker started where the saved cursor was, once the lease had run out, and went on page by page.
        assert after[0]["cursor"] == int(held["cursor"] or 0)
        assert after[0]["served_at"] >= held["lease_expires_at"]
        assert [page["cursor"] for page in after] == list(range(int(held["cursor"] or 0), PAGES))
    taken_over = {held["id"] for held in scenario.held_at_kill}
    assert all(job["attempt_count"] == 1 for job in scenario.final if job["id"] not in taken_over)


def test_no_page_was_lost_and_only_the_pages_in_flight_were_served_twice(scenario):
    assert len(scenario.final) == scenario.planned == 120
    for job in scenario.final:
        assert job["status"] == "completed" and job["processed_count"] == PAGES * RECORDS_PER_PAGE, job
    times = defaultdict(list)
    for page in scenario.pages:
        times[(page["job_id"], page["cursor"])].append(page)
    assert set(times) == {(job["id"], cursor) for job in scenario.final for cursor in range(PAGES)}
    twice = {key: pages for key, pages in times.items() if len(pages) > 1}
    in_flight = {(held["id"], int(held["cursor"] or 0)) for held in scenario.held_at_kill}
    assert set(twice) <= in_flight
    for pages in twice.values():
        first, again = pages
        assert first["pid"] in scenario.killed_pids and first["served_at"] < scenario.killed_at < again["served_at"]


def test_no_lane_ever_had_two_running_jobs(scenario):
    assert len(scenario.samples) > 200
    for sample in scenario.samples:
        lanes = [job["lane"] for job in sample if job["status"] == "running"]
        assert len(lanes) == len(set(lanes)), f"two running jobs in one lane: {sorted(lanes)}"
    assert max(sum(job["status"] == "running" for job in sample) for sample in scenario.samples) == SLOTS
    assert lane_overlaps(scenario.final) == []
    # In the API's log, a lane's pages come job after job: once another job's page came, a job came back only
    # if its worker was killed (its lost attempt is retried after a delay, and the lane goes on meanwhile).
    taken_over = {held["id"] for held in scenario.held_at_kill}
    for lane in {job["lane"] for job in scenario.final}:
        order = [page["job_id"] for page in scenario.pages if page["lane"] == lane]
        blocks = [job for i, job in enumerate(order) if i == 0 or order[i - 1] != job]
        came_back = Counter(blocks) - Counter(set(blocks))
        assert set(came_back) <= taken_over and max(came_back.values(), default=0) <= 1, (
            f"lane {lane} switched back to a job: {blocks}"
        )


def test_airflow_marked_the_lost_tasks_for_retry_and_reran_them_on_the_surviving_worker(scenario):
    """What Airflow does with a task whose worker died: the scheduler stops hearing its heartbeat, fails the
    try after ``task_instance_heartbeat_timeout`` (30 s here), and as the worker DAG allows retries, the next
    try runs on the worker that is left. The run ends successful."""
    lost = [
        ti["map_index"]
        for ti in scenario.instances_at_kill
        if ti["state"] == "running" and ti["hostname"] == scenario.victim
    ]
    assert lost
    for map_index in range(SLOTS):
        tries = sorted(scenario.tries[map_index], key=lambda t: t["try_number"])
        if map_index in lost:
            assert [t["try_number"] for t in tries] == [1, 2]
            assert (tries[0]["state"], tries[0]["hostname"]) == ("failed", scenario.victim), tries[0]
            assert (tries[1]["state"], tries[1]["hostname"]) == ("success", scenario.survivor), tries[1]
        else:
            assert [(t["try_number"], t["state"]) for t in tries] == [(1, "success")]
    states = {ti["state"] for _, tis in scenario.observed for ti in tis if ti["map_index"] in lost}
    assert "up_for_retry" in states
    assert scenario.run["state"] == "success"
