"""Downstream of SyncLane: runs whenever the queue's ``orders`` land, and counts the new orders per account.

Scheduled on the Asset ``synclane://<schema>/<queue>/orders``; a worker task of ``synclane_work`` emits one
event per run in which orders jobs completed, its ``extra`` naming each account (owner) with its jobs,
records and window span. This DAG reads those events and logs, and returns, the new orders per account: the
place to start a dbt run, a refresh, a report. Set ``[synclane] declaration`` and ``queue`` (or
$SYNCLANE_DECLARATION and $SYNCLANE_QUEUE) as for
``synclane_work`` (and SYNCLANE_DOWNSTREAM_TYPE for another type than ``orders``).
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import DAG, task

from synclane_provider.assets import asset
from synclane_provider.configured import declaration_path, queue_name
from synclane_provider.locate import locate_queue

SYNCLANE = declaration_path(default="synclane_provider.example:synclane")  # [synclane] declaration
QUEUE = queue_name(default="example")  # [synclane] queue
TYPE = os.environ.get("SYNCLANE_DOWNSTREAM_TYPE", "orders")

declaration, queue = locate_queue(SYNCLANE, QUEUE)  # imports the declaration only: no connection
landed = asset(declaration.schema, queue.name, queue.job_type(TYPE).name)

with DAG(
    dag_id="synclane_downstream",
    description=f"Count new {TYPE} per account whenever they land ({landed.uri})",
    schedule=[landed],
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["synclane"],
    doc_md=__doc__,
):

    @task
    def count_new_records(triggering_asset_events: Any = None) -> dict[str, int]:
        """New records per account over every event that triggered this run (several may be batched into one)."""
        per_account: Counter[str] = Counter()
        for event in (triggering_asset_events or {}).get(landed, []):
            for owner, landing in event.extra.get("owners", {}).items():
                per_account[owner] += int(landing["records"])
                print(
                    f"{owner}: {landing['records']} new {TYPE} in {landing['jobs']} job(s), "
                    f"{landing['window_start']} to {landing['window_end']}"
                )
        return dict(sorted(per_account.items()))

    count_new_records()
