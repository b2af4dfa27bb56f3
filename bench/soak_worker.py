"""A soak worker process: a pool of slots on the soak queue, its pages fetched from the fake API.

    python bench/soak_worker.py DATABASE_URL SCHEMA API_PORT ACK_FILE

It runs until SIGTERM (then stops gracefully, handing its jobs back at their cursors, and exits 0) or
until the soak SIGKILLs it. Anything else that ends it is an error the soak reports with its stderr.

Besides the pages, it writes down in ACK_FILE each write the database acknowledged: ``saved JOB PAGE T``
after a cursor save returned, ``done JOB T`` after a completion returned. A page the API serves later
below an acknowledged cursor, or of a job acknowledged complete, shows a commit the server lost (an
immediate restart with ``synchronous_commit = off``). Each line is one ``write`` to a file opened for
appending, so it is on its way to the disk even if the process is killed the instant after.

Settings the soak passes through the environment: ``SOAK_SLOTS``, ``SOAK_LANES``,
``SOAK_SYNCHRONOUS_COMMIT`` (the worker sessions' setting; the engine's default is ``off``) and
``SOAK_PLANT`` (a defect planted on purpose, to show the checks see it: ``skip-page``, ``double-call`` or ``parallel-call``).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane, WorkerPool  # noqa: E402
from synclane_provider.core.db.store import Store  # noqa: E402
from synclane_provider.core.states import JobStatus  # noqa: E402

QUEUE = "soak"
TYPE = "pages"
OWNERS_PER_LANE = 2
LEASE = timedelta(seconds=4)
"""Short, so a killed worker's jobs are taken over within seconds; long enough that a worker starved of CPU
for a moment on a busy machine still renews in time."""


def owners_of(lanes: int) -> list[Owner]:
    return [Owner(f"owner-{lane}-{n}", lane=f"lane-{lane}") for lane in range(lanes) for n in range(OWNERS_PER_LANE)]


def declaration(schema: str, *, lanes: int, slots: int, handler=None) -> SyncLane:
    """The soak's queue: one snapshot type whose jobs are enqueued by hand, retried fast and often (a job
    whose workers are killed again and again must not run out of attempts)."""
    return SyncLane(
        queues=[
            Queue(
                QUEUE,
                owners=lambda queue: owners_of(lanes),
                types=[SnapshotType(TYPE, handler or (lambda job: Page(None, 0)), every=timedelta(days=1))],
                lease=LEASE,
                concurrency=slots,
                max_attempts=1000,
                retry_delay=timedelta(milliseconds=100),
                retry_max_delay=timedelta(seconds=1),
            )
        ],
        schema=schema,
        poll_interval=timedelta(milliseconds=200),
    )


class ApiClient:
    """One keep-alive HTTP connection per thread to the fake API."""

    def __init__(self, port: int, plant: str) -> None:
        self.port = port
        self.plant = plant
        self._local = threading.local()

    def _get(self, path: str) -> dict:
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                body = response.read()
                if response.status != 200:
                    raise RuntimeError(f"fake API answered {response.status}: {body[:200]!r}")
                return json.loads(body)
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def __call__(self, job: Job) -> Page:
        path = f"/page?job={job.id}&lane={job.lane}&cursor={job.cursor or ''}&pid={os.getpid()}"
        body = self._get(path)
        planted = job.id % 25 == 3  # (ids 3, 28, 53, … have 2 to 5 pages)
        if self.plant == "double-call" and planted:
            body = self._get(path)  # the same page asked twice with no crash in between
        if self.plant == "parallel-call" and planted:
            other = threading.Thread(target=ApiClient(self.port, "")._get, args=(path,))
            other.start()  # the same lane asked from two threads at once
            body = self._get(path)
            other.join()
        if self.plant == "skip-page" and planted and body["next"] == "1":
            body = {**body, "next": "2"}  # page 1 never asked for
        return Page(body["next"], body["count"])


class Acks:
    """Writes down the writes the database acknowledged (see the module's docstring)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *words: object) -> None:
        os.write(self._fd, (" ".join(str(w) for w in words) + f" {time.monotonic()}\n").encode())

    def watch(self) -> None:
        """Wrap the store's two writes that move a job forward, to note each acknowledged one."""
        acks = self
        save_page, finish_and_take = Store.save_page, Store.finish_and_take

        def noted_save_page(self, job_id, *, cursor, **kwargs):
            saved = save_page(self, job_id, cursor=cursor, **kwargs)
            if saved is not None:
                acks.write("saved", job_id, cursor)
            return saved

        def noted_finish_and_take(self, *, finish, **kwargs):
            done = finish_and_take(self, finish=finish, **kwargs)
            if finish is not None and finish.status is JobStatus.COMPLETED and done.finished:
                acks.write("done", finish.job_id)
            return done

        Store.save_page = noted_save_page
        Store.finish_and_take = noted_finish_and_take


def main() -> None:
    url, schema, port, ack_path = sys.argv[1:5]
    lanes, slots = int(os.environ.get("SOAK_LANES", "12")), int(os.environ.get("SOAK_SLOTS", "3"))
    Acks(ack_path).watch()
    synclane = declaration(
        schema, lanes=lanes, slots=slots, handler=ApiClient(int(port), os.environ.get("SOAK_PLANT", ""))
    )
    # The slots' sessions take the setting from the declaration (the module's WORKER_SETTINGS is only read
    # by baselines): set there, or "on" would run with commit off.
    commit_on = os.environ.get("SOAK_SYNCHRONOUS_COMMIT", "off") == "on"
    synclane = dataclasses.replace(synclane, synchronous_commit=commit_on)
    database = synclane.database(url)
    database.application_name = f"soak-worker-{os.getpid()}"  # the soak finds (and terminates) these
    pool = WorkerPool(synclane, database, QUEUE)
    signal.signal(signal.SIGTERM, lambda *_: pool.shutdown())
    pool.run()


if __name__ == "__main__":
    main()
