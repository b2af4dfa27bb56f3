"""SyncLane planning: inserts the jobs every owner of the queue should have, at the declaration's plan interval,
and announces what the queue's jobs completed since the last run as asset events (``synclane_downstream`` runs
on them).

Planning is repeatable (a retried or doubled run inserts nothing more), so the
DAG needs no catchup and one active run at a time. A run that takes longer than
the interval delays the next one (``max_active_runs=1``: Airflow starts none
while one is active), and the next one is the latest interval's alone
(``catchup=False``): it plans whatever became due meanwhile. Any other planning
run of the queue that starts meanwhile (another deployment, the CLI) finds the
queue's planning lock held and returns at once with ``skipped`` set.

The ``assets`` task reads the completions from the table, whichever worker slot completed them, so downstream
DAGs hear of new data within a plan interval of the work, and each completion once.

Set ``[synclane] declaration`` ("package.module:attribute") and
``[synclane] queue`` to plan your own queue.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG

from synclane_provider.configured import declaration_path, queue_name
from synclane_provider.locate import locate_queue
from synclane_provider.operators.asset_events import SyncLaneAssetsOperator
from synclane_provider.operators.plan import SyncLanePlanOperator

SYNCLANE = declaration_path(default="synclane_provider.example:synclane")  # [synclane] declaration
QUEUE = queue_name(default="example")  # [synclane] queue

declaration, queue = locate_queue(SYNCLANE, QUEUE)  # imports the declaration only: no connection

with DAG(
    dag_id="synclane_plan",
    description=f"Plan SyncLane queue {queue.name} every {declaration.plan_interval}",
    schedule=declaration.plan_interval,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["synclane"],
    doc_md=__doc__,
):
    SyncLanePlanOperator(
        task_id="plan",
        declaration=SYNCLANE,
        synclane_queue=queue.name,
        retries=2,
        retry_delay=timedelta(seconds=15),
    )
    # One asset event per type whose jobs completed since the last run (not waiting for the planning to end).
    SyncLaneAssetsOperator(task_id="assets", declaration=SYNCLANE, synclane_queue=queue.name)
