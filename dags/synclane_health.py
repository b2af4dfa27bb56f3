"""SyncLane health: a check that fails when the queue needs a person, so that Airflow's alerting acts.

It fails, naming each owner, job and error, on a job abandoned since the
previous run (its data interval), a running job whose worker stopped renewing
its lease (stuck or gone), and an owner whose freshness lag exceeds the queue's
``max_lag``. Attach your alerting as to any task: ``email_on_failure``,
notifiers or ``on_failure_callback`` (in ``default_args`` below). Set
SYNCLANE_HEALTH_EVERY (seconds, default 300) to check more or less often.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, DeltaDataIntervalTimetable

from synclane_provider.configured import declaration_path, queue_name
from synclane_provider.locate import locate_queue
from synclane_provider.operators.health import SyncLaneHealthCheckOperator

SYNCLANE = declaration_path(default="synclane_provider.example:synclane")  # [synclane] declaration
QUEUE = queue_name(default="example")  # [synclane] queue
EVERY = timedelta(seconds=int(os.environ.get("SYNCLANE_HEALTH_EVERY", "300")))

declaration, queue = locate_queue(SYNCLANE, QUEUE)  # imports the declaration only: no connection

with DAG(
    dag_id="synclane_health",
    description=f"Check SyncLane queue {queue.name}: abandoned jobs, stuck workers, lagging owners",
    # Data intervals, not a bare timedelta (which in Airflow 3 gives every run an empty interval): consecutive
    # runs' intervals meet, so each abandonment falls in exactly one run's interval and is reported once. With
    # catchup=False Airflow skips the intervals it was down for; the next check reaches back over them.
    schedule=DeltaDataIntervalTimetable(EVERY),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0},  # e.g. add "on_failure_callback": [your_notifier] or "email": [...]
    tags=["synclane"],
    doc_md=__doc__,
):
    SyncLaneHealthCheckOperator(task_id="check", declaration=SYNCLANE, synclane_queue=queue.name)
