"""SyncLane workers: one mapped task per concurrency slot of the queue, each draining lanes from the shared table.

Each task takes and runs jobs until nothing is due, then lingers: for two
minutes after its last job it waits in its own process, listening for NOTIFY
and the next due time, and runs what comes at once. Only then does it defer to
the triggerer (holding no worker slot) until a job is inserted, requeued,
handed back or becomes due, and its trigger reports nothing for the first ten
seconds of the deferral. Both keep Airflow from failing a try that resumes
moments after it deferred: the scheduler may process the deferring try's exit
after the resumed try was queued, and then marks it for retry ("finished with
state success, but the task instance's state attribute is queued"). So short
gaps between jobs never defer, and a resume never comes before the deferral
has settled. The DAG params ``linger`` and ``settle`` (seconds; defaults from
SYNCLANE_LINGER and SYNCLANE_SETTLE) change the two; 0 turns each off. A task ends after ``idle_timeout`` seconds with nothing
to do or ``max_run_time`` seconds in all (DAG params, so a manual run can
change them); the DAG runs continuously, so the next run takes over at once.
Set ``[synclane] declaration`` and ``queue`` (or
$SYNCLANE_DECLARATION and $SYNCLANE_QUEUE) to work your own queue, and
SYNCLANE_IDLE_TIMEOUT (seconds) to change the default idle timeout.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, Param

from synclane_provider.configured import declaration_path, queue_name
from synclane_provider.locate import locate_queue
from synclane_provider.operators.work import SyncLaneWorkOperator

SYNCLANE = declaration_path(default="synclane_provider.example:synclane")  # [synclane] declaration
QUEUE = queue_name(default="example")  # [synclane] queue
IDLE_TIMEOUT = int(os.environ.get("SYNCLANE_IDLE_TIMEOUT", "600"))  # the default of the idle_timeout param
LINGER = float(os.environ.get("SYNCLANE_LINGER", "120"))  # the default of the linger param
SETTLE = float(os.environ.get("SYNCLANE_SETTLE", "10"))  # the default of the settle param

SLOT_RETRIES = 100

declaration, queue = locate_queue(SYNCLANE, QUEUE)  # imports the declaration only: no connection

with DAG(
    dag_id="synclane_work",
    description=f"Work SyncLane queue {queue.name} with {queue.concurrency} slot(s)",
    schedule="@continuous",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    params={
        "idle_timeout": Param(
            IDLE_TIMEOUT, type="number", minimum=1, description="seconds with nothing to do before a slot ends"
        ),
        "max_run_time": Param(3600, type="number", minimum=1, description="seconds a slot runs at most"),
        "linger": Param(
            LINGER, type="number", minimum=0, description="seconds a slot waits for more work before it defers"
        ),
        "settle": Param(
            SETTLE, type="number", minimum=0, description="seconds after a deferral before its trigger may fire"
        ),
        "jobs_per_slot": Param(
            queue.jobs_per_slot,
            type="integer",
            minimum=1,
            description="jobs each slot runs at once, each in a lane of its own (the queue's jobs_per_slot)",
        ),
    },
    tags=["synclane"],
    doc_md=__doc__,
):
    work = SyncLaneWorkOperator.partial(
        task_id="work",
        declaration=SYNCLANE,
        synclane_queue=queue.name,
        idle_timeout="{{ params.idle_timeout }}",
        max_run_time="{{ params.max_run_time }}",
        deferrable=True,
        linger="{{ params.linger }}",
        settle="{{ params.settle }}",
        jobs_per_slot="{{ params.jobs_per_slot }}",
        # Every Airflow restart fails a try of each slot: the one running (Ctrl-C, a deploy), or the one the
        # restarted scheduler hands out before the API server listens. So a slot gets more retries than
        # restarts can use up within one run (a run lasts at most max_run_time), each 15 s after the last:
        # the queue is back to all its slots within a minute or two of any restart, with nobody clearing
        # tasks. A slot that fails for a reason of its own (its declaration does not import, the database is
        # gone for longer than a worker waits) shows each failed try in the grid, and fails for good after
        # SLOT_RETRIES of them.
        retries=SLOT_RETRIES,
        retry_delay=timedelta(seconds=15),
        map_index_template="{{ task.synclane_queue }} slot {{ task.slot }}",
    ).expand(slot=list(range(queue.concurrency)))
