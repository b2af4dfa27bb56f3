"""A worker process for the crash loop: a pool of slots draining a queue from a fake API, telling its parent
on stdout what it is doing so the parent can SIGKILL it at a chosen point.

    python -m tests.support.crash_pool DATABASE_URL SCHEMA

Lines it prints (times are ``time.monotonic()``, shared by every process of the machine):

    begin JOB LANE WORKER TIME     a page is about to start (the fake API is called)
    end JOB LANE WORKER TIME       the page returned
    save JOB                       the cursor save is about to be sent
    finish JOB                     the completion is about to be sent
    drained                        every job is settled; the process exits

After ``begin``, ``save`` and ``finish`` the slot waits for a line on stdin before going on, so the parent
can kill it a chosen moment after letting it go: before, inside or after the page or statement.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from datetime import timedelta

from synclane_provider.core import Job, Owner, Page, Queue, Session, SnapshotType, SyncLane, WorkerPool

LANES = 16
OWNERS_PER_LANE = 3
PAGE_SIZE = 10
LEASE = timedelta(seconds=2)
SLOTS = 2


def owners(queue: str) -> list[Owner]:
    return [Owner(f"owner-{lane}-{n}", lane=f"lane-{lane}") for lane in range(LANES) for n in range(OWNERS_PER_LANE)]


def records_of(owner: str) -> int:
    """How many records the fake API serves for an owner: 40 to 129, so 4 to 13 pages."""
    lane, n = (int(part) for part in owner.split("-")[1:])
    return 40 + (lane * 37 + n * 53) % 90


def fake_api(job: Job) -> Page:
    """One page of the owner's records after the cursor, with the latency of a real API."""
    total = records_of(job.owner)
    offset = int(job.cursor or 0)
    time.sleep(random.uniform(0.002, 0.012))
    count = min(PAGE_SIZE, total - offset)
    following = offset + count
    return Page(str(following) if following < total else None, count)


def declaration(schema: str, handler=fake_api) -> SyncLane:
    return SyncLane(
        queues=[
            Queue(
                "crash",
                owners=owners,
                types=[SnapshotType("records", handler, every=timedelta(days=1))],
                lease=LEASE,
                concurrency=SLOTS,
                # A killed worker's attempt counts as failed once its lease lapses: retry soon, and often
                # enough that thirty kills spread over 48 jobs never use up a job's attempts.
                retry_delay=timedelta(milliseconds=100),
                retry_max_delay=timedelta(milliseconds=400),
                max_attempts=20,
            )
        ],
        schema=schema,
    )


_SAYING = threading.Lock()


def say(*words: object) -> None:
    """One whole line at a time: the pool's slots speak from several threads."""
    with _SAYING:
        sys.stdout.write(" ".join(str(word) for word in words) + "\n")
        sys.stdout.flush()


_WAITING = threading.Lock()


def announce(*words: object) -> None:
    """Say what is about to happen and wait until the parent lets it happen (one slot at a time: reading
    stdin from two threads at once can strand a line in the other's buffer)."""
    with _WAITING:
        say(*words)
        sys.stdin.readline()


def announced(handler):
    def page(job: Job) -> Page:
        announce("begin", job.id, job.lane, job.leased_by, time.monotonic())
        result = handler(job)
        say("end", job.id, job.lane, job.leased_by, time.monotonic())
        return result

    return page


def announce_writes() -> None:
    """Say which write is about to go out, just before it does: the parent kills on these lines."""
    run = Session.run

    def run_announced(self, name, **params):
        if name == "save_page":
            announce("save", params["id"])
        elif name == "finish_and_take" and params.get("finished") is not None:
            announce("finish", params["finished"])
        return run(self, name, **params)

    Session.run = run_announced


def main() -> None:
    url, schema = sys.argv[1:3]
    announce_writes()
    synclane = declaration(schema, announced(fake_api))
    pool = WorkerPool(synclane, synclane.database(url), "crash", poll_interval=timedelta(milliseconds=200))
    pool.run_until_settled()  # waits out the retries and the leases of killed siblings' jobs
    say("drained")


if __name__ == "__main__":
    main()
