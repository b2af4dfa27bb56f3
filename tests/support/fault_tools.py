"""What the fault tests share: killing a worker's connections, waiting on observed state, recording pages."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from synclane_provider.core import Database, Job, Page
from synclane_provider.core.db.queries import statement
from tests.support.lane_race import count_overlaps

PATIENCE = 60.0
"""Seconds a test waits for something it expects to happen: generous, the machines are shared and slow."""


def application_name(label: str) -> str:
    """A name of this test's own, so its connections can be found (and killed) in pg_stat_activity."""
    return f"fault-{label}-{uuid.uuid4().hex[:8]}"


def database(url: str, schema: str, name: str, *, conninfo: str | None = None) -> Database:
    """A database whose connections carry ``name``; with ``conninfo`` (a proxy) statements are never prepared,
    so every statement's text goes over the wire where the proxy can see it."""
    if conninfo is None:
        return Database(url, schema=schema, application_name=name)
    return Database(
        connect=lambda: psycopg.connect(conninfo, application_name=name, prepare_threshold=None, connect_timeout=10),
        schema=schema,
    )


def terminate(admin: psycopg.Connection, name: str) -> int:
    """Terminate every backend of ``name``, waiting until each is gone; returns how many this call ended
    (a backend that ended on its own meanwhile does not count)."""
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid, 30000) AS gone FROM pg_stat_activity WHERE application_name = %s", [name]
    ).fetchall()
    return sum(1 for row in rows if row["gone"])


def wait_for(condition: Callable[[], object], what: str, timeout: float = PATIENCE, every: float = 0.02):
    """Poll ``condition`` until it is truthy and return its value; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return value


def waiting_on_a_lock(admin: psycopg.Connection, name: str) -> bool:
    """Whether a backend of ``name`` is blocked on a lock right now."""
    row = admin.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", [name]
    ).fetchone()
    return row["n"] > 0


def marker(name: str, schema: str) -> re.Pattern[bytes]:
    """The named statement as it goes over the wire: what a proxy watches for."""
    return re.compile(re.escape(statement(name, schema).text))


@dataclass(frozen=True)
class PageRun:
    job: int
    lane: str
    cursor: str | None
    started: float
    ended: float


class PageLog:
    """Wraps a handler and records every page call with its interval, from any thread."""

    def __init__(self, handler: Callable[[Job], Page]) -> None:
        self.handler = handler
        self.runs: list[PageRun] = []
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> Page:
        started = time.monotonic()
        try:
            return self.handler(job)
        finally:
            with self._lock:
                self.runs.append(PageRun(job.id, job.lane, job.cursor, started, time.monotonic()))

    def cursors(self, job_id: int) -> list[str | None]:
        return [run.cursor for run in sorted(self.runs, key=lambda r: r.started) if run.job == job_id]

    def overlaps(self) -> int:
        """Pages of one lane that ran at the same time (there must be none)."""
        by_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for run in self.runs:
            by_lane[run.lane].append((run.started, run.ended))
        return count_overlaps(by_lane)
