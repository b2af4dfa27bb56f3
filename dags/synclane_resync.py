"""SyncLane re-sync: sync a range of one type again, for every owner or a few, as one request.

Trigger it by hand ("Trigger DAG" with these parameters, or the REST API). Like the re-sync form on the SyncLane
page, its form has no type until you choose one of the queue's, and it needs ``start`` and ``end`` (days written
``YYYY-MM-DD``, each its midnight UTC; ``end`` is excluded) and a ``reason``; ``owners`` (empty: every owner) and
a ``key`` that makes a second trigger with it add nothing are optional. Airflow refuses a trigger that lacks one
of them or has a day it cannot read, naming the parameter, and the task refuses them too before anything is
written. The workers run the request's windows newest first, after each lane's fresh work; its progress is on
the SyncLane page's Re-syncs view and in ``airflow synclane resyncs``. The same as ``Operations(synclane,
database).resync(queue, type, start, end, owners=..., reason=..., key=...)`` from code.
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
    dag_id="synclane_resync",
    description=f"Sync a range of SyncLane queue {queue.name} again (manual)",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    params={
        # No default: Airflow's form preselects nothing, and a trigger without one of these is refused.
        "type": Param(type="string", enum=[t.name for t in queue.types], description="the type to sync again"),
        "start": Param(type="string", format="date", description="the range's first day, from its midnight UTC"),
        "end": Param(type="string", format="date", description="the range's end (excluded): this day's midnight UTC"),
        "owners": Param(None, type=["null", "array"], description="only these owners (empty: every owner)"),
        "reason": Param(type="string", minLength=1, description="why it is synced again (shown with the request)"),
        "key": Param(None, type=["null", "string"], description="the request's key: the same key again adds nothing"),
    },
    tags=["synclane"],
    doc_md=__doc__,
):

    @task
    def resync(params: dict | None = None, dag_run=None) -> dict:
        """Records the request through the SyncLane connection; returns its key and the jobs it made."""
        from synclane_provider.core import Operations
        from synclane_provider.core.plan.resync import range_day
        from synclane_provider.hooks.synclane import SyncLaneHook

        asked = params or {}
        start, end = range_day("start", asked.get("start")), range_day("end", asked.get("end"))  # before connecting
        by = f"dag run {dag_run.run_id}" if dag_run is not None else "synclane_resync"
        with Operations(declaration, SyncLaneHook().get_database(declaration)) as operations:
            request = operations.resync(
                queue.name,
                asked.get("type"),
                start,
                end,
                owners=asked.get("owners") or None,
                reason=asked.get("reason") or "",
                key=asked.get("key") or None,
                by=by,
            )
        logging.getLogger(__name__).info(
            "re-sync %s of queue %s: %s job(s) made of %s", request.key, queue.name, request.made, request.jobs
        )
        return {"key": request.key, "made": request.made, "jobs": request.jobs}

    resync()
