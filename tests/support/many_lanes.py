"""The many-lanes workload: two worker slots of hundreds of jobs each, in a real Airflow, every page waiting on a slow
API at once.

``owners`` owners, each in a lane of its own, with two one-page jobs each (types ``first`` and ``second``, taken in
that order), in a queue of ``slots`` slots running ``jobs_per_slot`` jobs each. Every page waits
``0.5 + (job id % 6) / 10`` seconds, as a call to a slow API would (it sleeps: the slot's page threads wait, not
the CPU). Airflow's processes import the declaration by path (``tests.support.many_lanes:synclane``) and read its
shape from the environment, which the test sets with :meth:`ManyLanes.environment`.

Every page is logged, when it returns, as one JSON line in a file of its process's own under ``pages_dir``: its
job, lane, the pid that ran it, and when the handler was called and returned (epoch seconds, one clock for every
process of the machine). A page served twice is there twice, a page never served is missing.

A page called before the *gate* opens waits for it first: the gate is the file ``gate-open`` in ``pages_dir``,
which the test creates once it sees a job running in every lane. The two slots start seconds apart, and without
the gate the first one could be through many lanes before the second took any; with it, every lane's first page
is in flight at once, whatever the start-up order.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

from synclane_provider.core import Job, Operations, Owner, Page, Queue, SnapshotType, SyncLane
from tests.support.environment import FromEnvironment

QUEUE = "many"
TYPES = ("first", "second")
RECORDS_PER_PAGE = 3
ENV_PREFIX = "SYNCLANE_MANY_"
GATE_WAIT = 240.0
"""The longest a page waits for the gate: a test that never opens it fails on its own checks, not on a hang."""


def latency(job_id: int) -> float:
    """How long the slow API takes for a job's page: 0.5 to 1 s.

    >>> [latency(i) for i in range(7)]
    [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.5]
    """
    return 0.5 + (job_id % 6) / 10


@dataclass(frozen=True)
class ManyLanes(FromEnvironment):
    PREFIX: ClassVar[str] = ENV_PREFIX

    schema: str
    pages_dir: str
    owners: int = 400
    slots: int = 2
    jobs_per_slot: int = 200

    def owner_list(self) -> list[Owner]:
        return [Owner(f"owner-{i:04d}", lane=f"lane-{i:04d}") for i in range(self.owners)]

    def declaration(self) -> SyncLane:
        return SyncLane(
            queues=[
                Queue(
                    QUEUE,
                    owners=lambda queue: self.owner_list(),
                    types=[SnapshotType(name, self.serve_page, every=timedelta(days=1)) for name in TYPES],
                    concurrency=self.slots,
                    jobs_per_slot=self.jobs_per_slot,
                    lease=timedelta(minutes=2),
                    retry_delay=timedelta(seconds=1),
                    retry_max_delay=timedelta(seconds=2),
                )
            ],
            schema=self.schema,
            poll_interval=timedelta(seconds=2),
        )

    @property
    def gate(self) -> Path:
        return Path(self.pages_dir) / "gate-open"

    def serve_page(self, job: Job) -> Page:
        """The slow API: wait for the gate, then ``latency`` seconds; log the page; one page of records."""
        called = time.time()
        _gate_of(self.gate).wait(GATE_WAIT)
        time.sleep(latency(job.id))
        _log_page(
            Path(self.pages_dir),
            {
                "job": job.id,
                "lane": job.lane,
                "type": job.type,
                "pid": os.getpid(),
                "called": called,
                "ended": time.time(),
            },
        )
        return Page(None, RECORDS_PER_PAGE)

    def prepare(self, database_url: str) -> int:
        """Create the jobs table and plan every owner's jobs; returns the jobs planned."""
        Path(self.pages_dir).mkdir(parents=True, exist_ok=True)
        synclane = self.declaration()
        with Operations(synclane, synclane.database(database_url)) as ops:
            return ops.plan(QUEUE).total

    def served(self) -> list[dict]:
        """Every page served, by any process, in the order they returned."""
        pages = []
        for log in Path(self.pages_dir).glob("pages-*.jsonl"):
            pages.extend(json.loads(line) for line in log.read_text().splitlines() if line)
        return sorted(pages, key=lambda page: page["ended"])


_lock = threading.Lock()
_gates: dict[tuple[int, Path], threading.Event] = {}
_logs: dict[tuple[int, Path], object] = {}


def _gate_of(path: Path) -> threading.Event:
    """This process's view of the gate: an event one watcher thread sets once the file exists (the hundreds of
    waiting pages do not each poll the file system)."""
    key = (os.getpid(), path)  # a forked process watches on its own
    with _lock:
        gate = _gates.get(key)
        if gate is None:
            gate = _gates[key] = threading.Event()

            def watch() -> None:
                deadline = time.monotonic() + GATE_WAIT
                while not path.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                gate.set()

            threading.Thread(target=watch, name="gate-watcher", daemon=True).start()
    return gate


def _log_page(pages_dir: Path, page: dict) -> None:
    line = json.dumps(page) + "\n"
    key = (os.getpid(), pages_dir)
    with _lock:
        log = _logs.get(key)
        if log is None:
            log = _logs[key] = open(pages_dir / f"pages-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
        log.write(line)  # type: ignore[attr-defined]


synclane = ManyLanes.from_environment().declaration() if ENV_PREFIX + "SCHEMA" in os.environ else None
"""The declaration Airflow's processes import, built from the environment."""
