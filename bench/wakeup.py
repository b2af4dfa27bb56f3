"""Wake-up latency: from a job becoming due to its first page running, with the worker deferred on its trigger.

An idle worker task defers to ``JobDueTrigger``, which LISTENs for the queue and otherwise sleeps until
the earliest ``next_run_at``. For each trial the trigger is started and left waiting; then a job becomes
due (a new job enqueued, a stopped job requeued, or a job whose ``next_run_at`` arrives without any
notification) and the clock runs until the trigger has fired and a worker slot has taken the job and
called its handler. This is the engine's part of the wake-up; Airflow's own resumption of a deferred
task (triggerer, scheduler, a task process starting) comes on top and is not measured here.

Then the herd: 24 idle slots each deferred on a trigger of the queue, and 100 jobs enqueued one at a time
(each in a lane of its own, the next once the last has been taken). Every trigger that fires is a wake-up:
a slot resumes, tries a take, and defers again. ``wakeups_per_job`` is wake-ups over jobs taken (one NOTIFY
used to wake all 24), and ``herd_first_p50_s`` the time from an enqueue to the first trigger firing.

    .venv/bin/python bench/wakeup.py            # 30 trials, 24 slots x 100 jobs
    .venv/bin/python bench/wakeup.py --quick    # 9 trials, 24 slots x 30 jobs
"""

from __future__ import annotations

import argparse
import os
import queue as queues
import statistics
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone

from harness import database_url, drop_schema, schema_name

APPLICATION = "synclane-wakeup-bench"
URL = database_url()
HOME = tempfile.mkdtemp(prefix="synclane-wakeup-")
os.environ.update(
    {
        "AIRFLOW_HOME": HOME,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW_CONN_SYNCLANE_WAKEUP": f"{URL}{'&' if '?' in URL else '?'}application_name={APPLICATION}",
    }
)

import psycopg  # noqa: E402

from synclane_provider.core import Job, Operations, Page, Queue, SnapshotType, SyncLane, WorkerSlot  # noqa: E402
from synclane_provider.triggers.due import JobDueTrigger  # noqa: E402
from tests.support.helpers import execute  # noqa: E402
from tests.support.provider_helpers import in_background, wait_until_waiting  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="9 trials, 30 jobs for the herd")
    parser.add_argument("--slots", type=int, default=24, help="idle slots deferred at once")
    parser.add_argument("--jobs", type=int, default=100, help="jobs enqueued one at a time to the idle slots")
    args = parser.parse_args()
    trials = 9 if args.quick else args.trials
    herd_jobs = 30 if args.quick else args.jobs

    schema = schema_name("wakeup")
    started: dict[int, float] = {}
    ran = threading.Event()

    def handler(job: Job) -> Page:
        started[job.id] = time.perf_counter()
        ran.set()
        return Page(None, 1)

    declaration = SyncLane(
        queues=[Queue("wake", owners=lambda q: [], types=[SnapshotType("ping", handler, every=timedelta(days=1))])],
        schema=schema,
    )
    database = declaration.database(URL)
    ops = Operations(declaration, database)
    slot = WorkerSlot(declaration, database, "wake")
    ops.activity("wake")  # creates the schema

    results: dict[str, list[float]] = {"insert": [], "requeue": [], "next_run_at": []}
    with psycopg.connect(URL, autocommit=True, row_factory=psycopg.rows.dict_row) as admin:
        for trial in range(trials):
            kind = ("insert", "requeue", "next_run_at")[trial % 3]
            if kind == "requeue":  # a job that failed for good, to be requeued
                ops.enqueue("wake", f"owner-{trial}", "ping", lane=f"owner-{trial}", key=f"trial-{trial}")
                execute(
                    admin,
                    schema,
                    "UPDATE {jobs} SET status = 'abandoned' WHERE dedup_key = %s",
                    [f"manual:trial-{trial}"],
                )
            if kind == "next_run_at":  # due in 1.5 s, and nobody will say so
                run_at = datetime.now(timezone.utc) + timedelta(seconds=1.5)
                ops.enqueue(
                    "wake", f"owner-{trial}", "ping", lane=f"owner-{trial}", key=f"trial-{trial}", run_at=run_at
                )
            trigger = JobDueTrigger(
                synclane_conn_id="synclane_wakeup",
                schema=schema,
                queue="wake",
                until=datetime.now(timezone.utc) + timedelta(seconds=30),
                poll_interval=30.0,
            )
            event = in_background(trigger)
            wait_until_waiting(admin, APPLICATION, event)
            ran.clear()
            if kind == "insert":
                became_due = time.perf_counter()
                ops.enqueue("wake", f"owner-{trial}", "ping", lane=f"owner-{trial}", key=f"trial-{trial}")
            elif kind == "requeue":
                became_due = time.perf_counter()
                ops.requeue("wake", owner=f"owner-{trial}")
            else:
                became_due = time.perf_counter() + (run_at - datetime.now(timezone.utc)).total_seconds()
            payload = event.result(timeout=30)
            assert payload["status"] == "due", payload
            result = slot.run_one()
            assert result is not None and ran.is_set(), "the trigger fired but no job could be taken"
            results[kind].append(started[result.job.id] - became_due)

    herd = herd_of_idle_slots(declaration, database, ops, schema, slots=args.slots, jobs=herd_jobs)

    slot.close()
    ops.close()
    drop_schema(URL, schema)
    every = [value for values in results.values() for value in values]
    print(f"{'became due by':<14} {'trials':>6} {'p50 s':>7} {'max s':>7}")
    for kind, values in results.items():
        if values:
            print(f"{kind:<14} {len(values):>6} {statistics.median(values):7.3f} {max(values):7.3f}")
    print(
        f"{args.slots} idle slots, {herd['jobs']} jobs one at a time: {herd['wakeups']} wake-ups, "
        f"first wake-up p50 {herd['first_p50']:.4f} s, p95 {herd['first_p95']:.4f} s"
    )
    print(
        f"wakeup_p50_s={statistics.median(every):.3f} wakeup_max_s={max(every):.3f} trials={len(every)} "
        f"wakeups_per_job={herd['wakeups'] / herd['jobs']:.2f} herd_first_p50_s={herd['first_p50']:.4f} "
        f"slots={args.slots} jobs={herd['jobs']}"
    )


def herd_of_idle_slots(declaration: SyncLane, database, ops: Operations, schema: str, *, slots: int, jobs: int) -> dict:
    """``slots`` deferred slots, ``jobs`` jobs enqueued one at a time: how many wake-ups each job costs."""
    name = f"{APPLICATION}-herd"
    os.environ["AIRFLOW_CONN_SYNCLANE_HERD"] = f"{URL}{'&' if '?' in URL else '?'}application_name={name}"
    takers: queues.Queue[WorkerSlot] = queues.Queue()
    for _ in range(4):  # slots share a few connections to take with: the wake-ups are what is counted
        takers.put(WorkerSlot(declaration, database, "wake"))
    lock = threading.Lock()
    counts = {"wakeups": 0, "taken": 0}
    fired: list[float] = []
    stop = threading.Event()

    def idle_slot() -> None:
        while not stop.is_set():
            trigger = JobDueTrigger(
                synclane_conn_id="synclane_herd",
                schema=schema,
                queue="wake",
                until=datetime.now(timezone.utc) + timedelta(seconds=20),
                poll_interval=30.0,
            )
            event = in_background(trigger, timeout=60).result(timeout=60)
            if event["status"] != "due" or stop.is_set():
                continue  # timed out: defer again (an idle worker's deadline passing is not a wake-up)
            with lock:
                counts["wakeups"] += 1
                fired.append(time.perf_counter())
            taker = takers.get()
            try:
                while taker.run_one() is not None:  # a resumed worker drains what it can, then defers again
                    with lock:
                        counts["taken"] += 1
            finally:
                takers.put(taker)

    threads = [threading.Thread(target=idle_slot, daemon=True) for _ in range(slots)]
    for thread in threads:
        thread.start()
    first: list[float] = []
    with psycopg.connect(URL, autocommit=True, row_factory=psycopg.rows.dict_row) as admin:
        for number in range(jobs):
            deadline = time.monotonic() + 30
            while idle_waiting(admin, name) < slots:  # every slot deferred again
                assert time.monotonic() < deadline, f"only {idle_waiting(admin, name)} of {slots} slots deferred"
                time.sleep(0.005)
            with lock:
                before = len(fired)
            enqueued = time.perf_counter()
            ops.enqueue("wake", f"herd-{number}", "ping", lane=f"herd-{number}", key=f"herd-{number}")
            while True:
                with lock:
                    if counts["taken"] > number:
                        break
                assert time.perf_counter() - enqueued < 30, "a job was not taken within 30 s"
                time.sleep(0.002)
            with lock:
                first.append(fired[before] - enqueued)
        time.sleep(0.5)  # late wake-ups of the last job count too
    stop.set()
    for thread in threads:
        thread.join(0.1)
    while not takers.empty():
        takers.get().close()
    first.sort()
    return {
        "wakeups": counts["wakeups"],
        "jobs": counts["taken"],
        "first_p50": statistics.median(first),
        "first_p95": first[int(0.95 * (len(first) - 1))],
    }


def idle_waiting(admin: psycopg.Connection, name: str) -> int:
    """Triggers of the herd that have looked at the table and sit waiting for a notification."""
    return admin.execute(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE application_name = %s AND state = 'idle' AND query <> '' AND query NOT LIKE 'LISTEN%%'"
        " AND query NOT LIKE 'SELECT pg_advisory_lock_shared%%'",
        [name],
    ).fetchone()["n"]


if __name__ == "__main__":
    main()
