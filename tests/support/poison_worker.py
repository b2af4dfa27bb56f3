"""A worker process whose queue holds a poison page: the second page of ``acme-us``'s job kills the process
that runs it (as an out-of-memory kill or a crashing parser would), every time.

    python -m tests.support.poison_worker DATABASE_URL SCHEMA

It prints ``started PID`` and runs the queue until every job is settled, then prints ``settled``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane, WorkerPool

MAX_ATTEMPTS = 3
LEASE = timedelta(seconds=1)


def pages(job: Job) -> Page:
    if job.owner == "acme-us" and job.cursor == "50":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    offset = int(job.cursor or 0)
    return Page(str(offset + 50) if offset < 200 else None, 50)


def declaration(schema: str) -> SyncLane:
    return SyncLane(
        queues=[
            Queue(
                "poison",
                owners=lambda queue: [Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme")],
                types=[SnapshotType("orders", pages, every=timedelta(days=1))],
                concurrency=2,
                max_attempts=MAX_ATTEMPTS,
                lease=LEASE,
                retry_delay=timedelta(milliseconds=200),
            )
        ],
        schema=schema,
    )


def main() -> None:
    url, schema = sys.argv[1:3]
    synclane = declaration(schema)
    print("started", os.getpid(), flush=True)
    WorkerPool(
        synclane, synclane.database(url), "poison", poll_interval=timedelta(milliseconds=200)
    ).run_until_settled()
    print("settled", flush=True)


if __name__ == "__main__":
    main()
