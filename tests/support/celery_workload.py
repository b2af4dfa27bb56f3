"""The scale-out workload: a queue whose every page waits on a slow API, and a log of every page served.

Airflow's processes import the declaration by path (``tests.support.celery_workload:synclane``) and read its
shape from the environment, which the Celery test and ``bench/scaleout.py`` set with
:meth:`Workload.environment`: ``owners`` owners spread round-robin over ``lanes`` lanes, one snapshot job
each, ``pages`` pages a job, each taking ``latency`` seconds. Like a real sync the handler spends its time
waiting on the other side (it sleeps), so the number of worker slots limits throughput, not the CPU.

The fake API logs each page in ``<schema>.pages`` as it starts serving it, with the Airflow hostname and
the pid of the process that asked: a page served twice is there twice, a page never served is missing.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from synclane_provider.core import Job, Operations, Owner, Page, Queue, SnapshotType, SyncLane
from tests.support.database import drop_schemas
from tests.support.environment import FromEnvironment

ENV_PREFIX = "SYNCLANE_SCALEOUT_"

QUEUE = "scaleout"
RECORDS_PER_PAGE = 10


@dataclass(frozen=True)
class Workload(FromEnvironment):
    PREFIX: ClassVar[str] = ENV_PREFIX

    schema: str
    database_url: str
    """The database of the jobs table; the page log is written there too."""
    owners: int = 120
    lanes: int = 8
    pages: int = 6
    latency: float = 0.4
    slots: int = 4
    """The queue's concurrency: how many mapped tasks the worker DAG runs."""
    lease: float = 15.0

    def owner_list(self) -> list[Owner]:
        return [Owner(f"owner-{i:04d}", lane=f"lane-{i % self.lanes:02d}") for i in range(self.owners)]

    def declaration(self) -> SyncLane:
        return SyncLane(
            queues=[
                Queue(
                    QUEUE,
                    owners=lambda queue: self.owner_list(),
                    types=[SnapshotType("export", self.serve_page, every=timedelta(days=1))],
                    concurrency=self.slots,
                    lease=timedelta(seconds=self.lease),
                    retry_delay=timedelta(seconds=1),
                    retry_max_delay=timedelta(seconds=2),
                )
            ],
            schema=self.schema,
            poll_interval=timedelta(seconds=2),
        )

    def serve_page(self, job: Job) -> Page:
        """The slow API: log the page as served, wait ``latency`` seconds, give ``RECORDS_PER_PAGE`` records."""
        cursor = int(job.cursor or 0)
        _page_log(self).execute(
            sql.SQL("INSERT INTO {}.pages (job_id, lane, cursor, served_by, pid) VALUES (%s, %s, %s, %s, %s)").format(
                sql.Identifier(self.schema)
            ),
            [job.id, job.lane, cursor, _hostname(), os.getpid()],
        )
        time.sleep(self.latency)
        following = cursor + 1
        return Page(str(following) if following < self.pages else None, RECORDS_PER_PAGE)

    def prepare(self) -> int:
        """Create the jobs table and the page log, and plan every owner's job; returns the jobs planned."""
        synclane = self.declaration()
        with Operations(synclane, synclane.database(self.database_url)) as ops:
            ops.activity(QUEUE)  # creates the jobs table
            with psycopg.connect(self.database_url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.pages (id bigserial PRIMARY KEY, job_id bigint NOT NULL, "
                        "lane text NOT NULL, cursor int NOT NULL, served_by text NOT NULL, pid int NOT NULL, "
                        "served_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                    ).format(sql.Identifier(self.schema))
                )
            return ops.plan(QUEUE).total

    def jobs(self) -> list[dict]:
        return _select(self, "SELECT * FROM {}.jobs ORDER BY id")

    def served(self) -> list[dict]:
        """Every page served, in the order the API was asked."""
        return _select(self, "SELECT * FROM {}.pages ORDER BY served_at, id")

    def drop(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            drop_schemas(conn, self.schema)


def _select(workload: Workload, query: str) -> list[dict]:
    with psycopg.connect(workload.database_url, row_factory=dict_row) as conn:
        return conn.execute(sql.SQL(query).format(sql.Identifier(workload.schema))).fetchall()


_log_connection: tuple[int, psycopg.Connection] | None = None


def _page_log(workload: Workload) -> psycopg.Connection:
    """This process's connection for the page log (a forked process opens its own)."""
    global _log_connection
    if _log_connection is None or _log_connection[0] != os.getpid() or _log_connection[1].closed:
        _log_connection = (os.getpid(), psycopg.connect(workload.database_url, autocommit=True))
    return _log_connection[1]


def _hostname() -> str:
    """The host name Airflow gives this process's task instance (``[core] hostname_callable``)."""
    from airflow.sdk.api.client import get_hostname

    return get_hostname()


def lane_overlaps(jobs: list[dict]) -> list[tuple[int, int]]:
    """Pairs of completed jobs of one lane whose runs (``started_at`` to ``completed_at``) overlap."""
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for job in jobs:
        if job["status"] == "completed":
            by_lane[job["lane"]].append(job)
    pairs = []
    for runs in by_lane.values():
        runs.sort(key=lambda job: job["started_at"])
        for i, later in enumerate(runs):
            pairs.extend(
                (earlier["id"], later["id"]) for earlier in runs[:i] if earlier["completed_at"] > later["started_at"]
            )
    return pairs


synclane = Workload.from_environment().declaration() if ENV_PREFIX + "SCHEMA" in os.environ else None
"""The declaration Airflow's processes import, built from the environment."""
