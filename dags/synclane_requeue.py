"""SyncLane requeue: give failed, deferred and abandoned jobs fresh attempts; each continues from its cursor.

Trigger it by hand ("Trigger DAG" with these parameters, or the REST API) once
the cause is fixed: ``owner`` and ``type`` narrow it down, empty means all.
The same as ``Operations(synclane, database).requeue(queue, owner=..., type=...)``
from code, or the ``UPDATE`` shown in docs/how-to/jobs-from-code.md.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from airflow.sdk import DAG, Param, task

from synclane_provider.configured import declaration_path, queue_name
from synclane_provider.locate import locate_queue

SYNCLANE = declaration_path(default="synclane_provider.example:synclane")  # [synclane] declaration
QUEUE = queue_name(default="example")  # [synclane] queue

declaration, queue = locate_queue(SYNCLANE, QUEUE)  # imports the declaration only: no connection

with DAG(
    dag_id="synclane_requeue",
    description=f"Requeue stopped jobs of SyncLane queue {queue.name} (manual)",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    params={
        "owner": Param(None, type=["null", "string"], description="only this owner's jobs (empty: every owner)"),
        "type": Param(None, type=["null", "string"], description="only jobs of this type (empty: every type)"),
    },
    tags=["synclane"],
    doc_md=__doc__,
):

    @task
    def requeue(params: dict | None = None) -> dict:
        """Runs the engine's requeue through the SyncLane connection; returns how many jobs it gave new attempts."""
        from synclane_provider.core import Operations
        from synclane_provider.hooks.synclane import SyncLaneHook

        owner, job_type = (params or {}).get("owner") or None, (params or {}).get("type") or None
        with Operations(declaration, SyncLaneHook().get_database(declaration)) as operations:
            count = operations.requeue(queue.name, owner=owner, type=job_type)
        logging.getLogger(__name__).info(
            "requeued %s job(s) of queue %s (owner %s, type %s)", count, queue.name, owner or "any", job_type or "any"
        )
        return {"requeued": count}

    requeue()
