"""Hundreds of jobs a slot in a real Airflow: ``airflow standalone`` runs the worker DAG mapped over two slots of
``jobs_per_slot=200`` (the DAG param's default, the queue's ``jobs_per_slot``), and they drain 400 lanes.

The workload (:mod:`tests.support.many_lanes`): 400 owners, each in a lane of its own, two one-page jobs each (800
jobs), every page waiting 0.5-1 s on a slow API. The first page of every lane waits at a gate that opens once all
400 lanes have a running job, so that both slots hold 200 jobs at once whichever started first. The jobs table
and nothing else is in a database of the test's own, so that every client connection to it is the run's.

One scenario runs once for the module; each test asserts one promise about it. While it runs, its footprint is
sampled five times a second (:mod:`tests.support.footprint`): client connections to the jobs database, the
resident memory of each task process, the jobs running; ``pytest -s`` prints the figures.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from synclane_demo.local import PROJECT, airflow_environment, airflow_service, wait_for_airflow
from tests.support.celery_workload import lane_overlaps
from tests.support.footprint import OBSERVER, Footprint
from tests.support.many_lanes import QUEUE, RECORDS_PER_PAGE, ManyLanes
from tests.support.real_airflow import AirflowApi, clean_environment, free_port, wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]

WORK_DAG = "synclane_work"
OWNERS, SLOTS, JOBS_PER_SLOT = 400, 2, 200
JOBS = OWNERS * 2
CONNECTIONS = 4
"""A slot's database connections: the queue's ``connections`` default, shared by its 200 jobs."""
IDLE_TIMEOUT = 5
"""Seconds a slot waits with nothing to do before its task ends: the run ends soon after the last job."""
ENDED = {"success", "failed", "up_for_retry", "upstream_failed", "skipped", "removed"}


@dataclass
class Scenario:
    workload: ManyLanes
    planned: int = 0
    final: list[dict] = field(default_factory=list)
    pages: list[dict] = field(default_factory=list)
    instances: list[dict] = field(default_factory=list)
    tries: list[dict] = field(default_factory=list)
    footprint: Footprint | None = None
    timings: dict[str, float] = field(default_factory=dict)
    gate_opened: float = 0.0
    """When the gate opened (epoch seconds, the page log's clock)."""


def select_jobs(url: str, schema: str) -> list[dict]:
    with psycopg.connect(url, row_factory=dict_row, application_name=OBSERVER) as conn:
        return conn.execute(sql.SQL("SELECT * FROM {}.jobs ORDER BY id").format(sql.Identifier(schema))).fetchall()


@pytest.fixture(scope="module")
def scenario(database_url, tmp_path_factory, airflow_metadata):
    started = time.monotonic()
    home = tmp_path_factory.mktemp("many")
    suffix = uuid.uuid4().hex[:8]
    metadata_db, jobs_db = f"synclane_many_airflow_{suffix}", f"synclane_many_jobs_{suffix}"
    jobs_url = psycopg.conninfo.make_conninfo(database_url, dbname=jobs_db)
    workload = ManyLanes(
        schema="synclane", pages_dir=str(home / "pages"), owners=OWNERS, slots=SLOTS, jobs_per_slot=JOBS_PER_SLOT
    )
    run = Scenario(workload)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(jobs_db)))
    airflow_metadata(metadata_db)  # migrated already: standalone finds nothing to migrate
    dags = home / "dags"  # the worker DAG alone: nothing else to parse, plan or run
    dags.mkdir()
    shutil.copy(PROJECT / "dags" / "synclane_work.py", dags)
    port = free_port()
    env = airflow_environment(
        {
            **clean_environment(),
            "PYTHONPATH": str(PROJECT),  # the task processes import the workload's declaration
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "SYNCLANE_DECLARATION": "tests.support.many_lanes:synclane",
            "SYNCLANE_QUEUE": QUEUE,
            "SYNCLANE_IDLE_TIMEOUT": str(IDLE_TIMEOUT),
            **workload.environment(),
        },
        home=home / "airflow",
        data_url=jobs_url,
        metadata_url=psycopg.conninfo.make_conninfo(database_url, dbname=metadata_db),
        port=port,
        shop_url=None,
        parallelism=SLOTS,
    )
    airflow = airflow_service(env, home)
    footprint = run.footprint = Footprint(jobs_url, workload.schema, airflow)
    try:
        run.planned = workload.prepare(jobs_url)
        airflow.start()
        footprint.start()
        explain = lambda: f"sampler: {footprint.error!r}\n{airflow.tail(60)}"  # noqa: E731 - when a wait times out
        wait_for_airflow(airflow, port, timeout=300)
        run.timings["airflow healthy"] = time.monotonic() - started
        api = AirflowApi(f"http://127.0.0.1:{port}", home / "airflow")

        wait_until(lambda: footprint.running == OWNERS, 240, f"{OWNERS} jobs running", every=0.2, explain=explain)
        workload.gate.touch()
        run.gate_opened = time.time()
        run.timings["every lane running"] = time.monotonic() - started

        def all_completed() -> bool:
            return footprint.running == 0 and all(
                job["status"] == "completed" for job in select_jobs(jobs_url, workload.schema)
            )

        wait_until(all_completed, 180, f"all {JOBS} jobs completed", every=0.5, explain=explain)
        run.timings["all completed"] = time.monotonic() - started
        # No further run: the continuous schedule would start the next one as soon as this one ends.
        api.patch(f"/api/v2/dags/{WORK_DAG}", {"is_paused": True})

        def instances_ended() -> list[dict] | None:
            [first] = api.runs(WORK_DAG)
            found = [ti for ti in api.task_instances(WORK_DAG, first["dag_run_id"]) if ti["task_id"] == "work"]
            return found if len(found) == SLOTS and all(ti["state"] in ENDED for ti in found) else None

        run.instances = wait_until(instances_ended, 120, "both slots' tasks to end", every=1, explain=explain)
        run.timings["slots ended"] = time.monotonic() - started
        run.tries = api.tries(WORK_DAG, "work")
        footprint.stop()
        run.final = select_jobs(jobs_url, workload.schema)
        run.pages = workload.served()
        yield run
    finally:
        try:
            try:
                footprint.stop()
            finally:
                airflow.stop(graceful=60)
                run.timings["stopped"] = time.monotonic() - started
        finally:
            with psycopg.connect(database_url, autocommit=True) as conn:
                for name in (metadata_db, jobs_db):
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            print(report(run))


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals (start, end) that overlap at one moment.

    >>> peak_overlap([(0, 2), (1, 3), (2, 4), (5, 6)])
    2
    """
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = peak = 0
    for _, change in events:
        now += change
        peak = max(peak, now)
    return peak


def pages_in_flight(pages: list[dict]) -> int:
    return peak_overlap([(page["called"], page["ended"]) for page in pages])


def jobs_at_once(jobs: list[dict]) -> int:
    return peak_overlap([(job["started_at"].timestamp(), job["completed_at"].timestamp()) for job in jobs])


def report(run: Scenario) -> str:
    """The figures, for ``pytest -s``: timings, connections, memory, what ran at once."""
    lines = [f"\njobs_per_slot in Airflow, timings (s): { {k: round(v, 1) for k, v in run.timings.items()} }"]
    footprint = run.footprint
    if footprint is not None:
        lines.append(
            f"peak client connections to the jobs database: {footprint.connections_peak} "
            f"(by application_name: {dict(footprint.connections_peak_by_name)}), {footprint.samples} samples"
        )
        slot_of = {ti["id"]: ti["map_index"] for ti in run.instances}
        for task in sorted(footprint.tasks.values(), key=lambda t: slot_of.get(t.ti_id, -1)):
            lines.append(
                f"slot {slot_of.get(task.ti_id, '?')} (pid {task.pid}): peak VmRSS {task.peak_rss_kb / 1024:.0f} MB "
                f"sampled, VmHWM {task.high_water_kb / 1024:.0f} MB, {task.peak_threads} threads"
            )
        lines.append(f"peak jobs running (sampled from the table): {footprint.running_peak}")
    if run.pages:
        by_pid = defaultdict(list)
        for page in run.pages:
            by_pid[page["pid"]].append(page)
        lines.append(
            f"pages in flight at once: {pages_in_flight(run.pages)} "
            f"(per process: { {pid: pages_in_flight(pages) for pid, pages in by_pid.items()} })"
        )
    if run.pages and run.gate_opened:
        after = lambda pages, key: sorted(page[key] - run.gate_opened for page in pages)  # noqa: E731
        first = [page for page in run.pages if page["type"] == "first"]
        second = [page for page in run.pages if page["type"] == "second"]
        lines.append(
            "after the gate opened (s): first pages returned by "
            f"{after(first, 'ended')[len(first) // 2]:.1f} (median) / {after(first, 'ended')[-1]:.1f} (last); "
            f"second pages called from {after(second, 'called')[0]:.1f} to {after(second, 'called')[-1]:.1f}, "
            f"the last returned at {after(run.pages, 'ended')[-1]:.1f}"
        )
    if run.final and all(job["completed_at"] for job in run.final):
        lines.append(f"jobs running at once (started_at to completed_at): {jobs_at_once(run.final)}")
    return "\n".join(lines)


# -- the promises ----------------------------------------------------------------------------------------


def test_every_job_completed_once_in_its_first_attempt(scenario):
    assert scenario.planned == len(scenario.final) == JOBS
    assert Counter((job["status"], job["attempt_count"]) for job in scenario.final) == {("completed", 1): JOBS}
    assert {job["processed_count"] for job in scenario.final} == {RECORDS_PER_PAGE}
    # Each job's one page was served once: none lost, none served again.
    assert sorted(page["job"] for page in scenario.pages) == sorted(job["id"] for job in scenario.final)


def test_no_lane_ever_ran_two_pages_or_two_jobs_at_once(scenario):
    by_lane = defaultdict(list)
    for page in scenario.pages:
        by_lane[page["lane"]].append((page["called"], page["ended"]))
    assert len(by_lane) == OWNERS
    overlapping = {lane: pages for lane, pages in by_lane.items() if peak_overlap(pages) > 1}
    assert overlapping == {}
    assert lane_overlaps(scenario.final) == []


def test_both_slots_ran_200_jobs_at_once(scenario):
    """Each slot's task process ran pages of 200 jobs at once, no more, and the two together every lane."""
    by_pid = defaultdict(list)
    for page in scenario.pages:
        by_pid[page["pid"]].append(page)
    task_pids = set(scenario.footprint.tasks)
    assert set(by_pid) <= task_pids and len(by_pid) == SLOTS
    assert sorted(pages_in_flight(pages) for pages in by_pid.values()) == [JOBS_PER_SLOT] * SLOTS
    assert pages_in_flight(scenario.pages) == jobs_at_once(scenario.final) == OWNERS


def test_no_task_try_failed(scenario):
    """Each slot ran in one try, which succeeded: no try failed and none was retried."""
    assert sorted((t["map_index"], t["try_number"], t["state"]) for t in scenario.tries) == [
        (slot, 1, "success") for slot in range(SLOTS)
    ]
    assert {ti["state"] for ti in scenario.instances} == {"success"}


def test_the_slots_shared_a_few_connections_among_their_jobs(scenario):
    """400 jobs at once took no more than each slot's few connections, the one its process listens for wake-ups on,
    and the one a lingering slot's trigger listens on: not a connection per job."""
    footprint = scenario.footprint
    assert footprint.samples > 50
    assert footprint.connections_peak_by_name["synclane-worker"] <= SLOTS * (CONNECTIONS + 1)
    assert footprint.connections_peak <= SLOTS * (CONNECTIONS + 2)
