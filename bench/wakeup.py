"""Wake-up latency: from a job becoming due to its first page running, with the worker deferred on its trigger.

An idle worker task defers to ``JobDueTrigger``, which LISTENs for the queue and otherwise sleeps until
the earliest ``next_run_at``. For each trial the trigger is started and left waiting; then a job becomes
due (a new job enqueued, a stopped job requeued, or a job whose ``next_run_at`` arrives without any
notification) and the clock runs until the trigger has fired and a worker slot has taken the job and
called its handler. This is the engine's part of the wake-up; Airflow's own resumption of a deferred
task (triggerer, scheduler, a task process starting) comes on top and is not measured here.

    .venv/bin/python bench/wakeup.py            # 30 trials
    .venv/bin/python bench/wakeup.py --quick    # 9 trials
"""

from __future__ import annotations

import argparse
import os
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
from tests.helpers import execute  # noqa: E402
from tests.provider.helpers import in_background, wait_until_waiting  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="9 trials")
    args = parser.parse_args()
    trials = 9 if args.quick else args.trials

    schema = schema_name("wakeup")
    started: dict[int, float] = {}
    ran = threading.Event()

    def handler(job: Job) -> Page:
        started[job.id] = time.perf_counter()
        ran.set()
        return Page(None, 1)

    lane = SyncLane(queues=[Queue("wake", owners=lambda q: [], types=[SnapshotType("ping", handler, every=timedelta(days=1))])],
                    schema=schema)
    database = lane.database(URL)
    ops = Operations(lane, database)
    slot = WorkerSlot(lane, database, "wake")
    ops.activity("wake")  # creates the schema

    results: dict[str, list[float]] = {"insert": [], "requeue": [], "next_run_at": []}
    with psycopg.connect(URL, autocommit=True, row_factory=psycopg.rows.dict_row) as admin:
        for trial in range(trials):
            kind = ("insert", "requeue", "next_run_at")[trial % 3]
            if kind == "requeue":  # a job that failed for good, to be requeued
                ops.enqueue("wake", f"owner-{trial}", "ping", key=f"trial-{trial}")
                execute(admin, schema, "UPDATE {jobs} SET status = 'abandoned' WHERE dedup_key = %s", [f"manual:trial-{trial}"])
            if kind == "next_run_at":  # due in 1.5 s, and nobody will say so
                run_at = datetime.now(timezone.utc) + timedelta(seconds=1.5)
                ops.enqueue("wake", f"owner-{trial}", "ping", key=f"trial-{trial}", run_at=run_at)
            trigger = JobDueTrigger(synclane_conn_id="synclane_wakeup", schema=schema, queue="wake",
                                    until=datetime.now(timezone.utc) + timedelta(seconds=30), poll_interval=30.0)
            event = in_background(trigger)
            wait_until_waiting(admin, APPLICATION, event)
            ran.clear()
            if kind == "insert":
                became_due = time.perf_counter()
                ops.enqueue("wake", f"owner-{trial}", "ping", key=f"trial-{trial}")
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

    slot.close()
    ops.close()
    drop_schema(URL, schema)
    every = [value for values in results.values() for value in values]
    print(f"{'became due by':<14} {'trials':>6} {'p50 s':>7} {'max s':>7}")
    for kind, values in results.items():
        if values:
            print(f"{kind:<14} {len(values):>6} {statistics.median(values):7.3f} {max(values):7.3f}")
    print(f"wakeup_p50_s={statistics.median(every):.3f} wakeup_max_s={max(every):.3f} trials={len(every)}")


if __name__ == "__main__":
    main()
