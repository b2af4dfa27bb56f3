"""Downstream of SyncLane: runs whenever the queue's ``orders`` land, and counts the new orders per account.

Scheduled on the Asset ``synclane://<schema>/<queue>/orders``; the ``assets`` task of ``synclane_plan`` emits,
every minute, one event when orders jobs completed since its last run, its ``extra`` naming each account
(owner) with its jobs, records and window span. This DAG reads those events and logs, and returns, the new orders per account: the
place to start a dbt run, a refresh, a report. When a run carried re-sync work, the event's ``resyncs`` names
each request's re-fetched windows per account, and ``rebuild_resynced_partitions`` turns them into exactly the
daily partitions to rebuild. Set ``[synclane] declaration`` and ``queue`` (or
$SYNCLANE_DECLARATION and $SYNCLANE_QUEUE) as for
``synclane_work`` (and SYNCLANE_DOWNSTREAM_TYPE for another type than ``orders``).
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta, timezone
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

    @task
    def rebuild_resynced_partitions(triggering_asset_events: Any = None) -> dict[str, dict[str, list[str]]]:
        """The daily partitions to rebuild per re-sync request and account: exactly the days whose windows a
        re-sync fetched again in the runs that triggered this one (``extra["resyncs"]``), nothing else."""
        partitions: dict[str, dict[str, set[str]]] = {}
        for event in (triggering_asset_events or {}).get(landed, []):
            for request, accounts in event.extra.get("resyncs", {}).items():
                for owner, windows in accounts.items():
                    days = partitions.setdefault(request, {}).setdefault(owner, set())
                    for window in windows:
                        days.update(days_of(window["window_start"], window["window_end"]))
        for request, accounts in sorted(partitions.items()):
            for owner, days in sorted(accounts.items()):
                print(f"re-sync {request}: rebuild {owner}'s {TYPE} for {len(days)} day(s): {', '.join(sorted(days))}")
        return {
            request: {owner: sorted(days) for owner, days in accounts.items()}
            for request, accounts in partitions.items()
        }

    count_new_records()
    rebuild_resynced_partitions()


def days_of(start: str | None, end: str | None) -> list[str]:
    """The days (UTC) a window ``[start, end)`` touches, as ``2026-03-01``; none for a snapshot (no window)."""
    if start is None or end is None:
        return []
    first, last = datetime.fromisoformat(start), datetime.fromisoformat(end) - timedelta(microseconds=1)
    return [(first.date() + timedelta(days=n)).isoformat() for n in range((last.date() - first.date()).days + 1)]
