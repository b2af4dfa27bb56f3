"""Building blocks for tests: declarations, fake APIs that page, and reading rows back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta

import psycopg
from psycopg import sql

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane, WindowedType
from synclane_provider.core.declare.declarations import RETRY_SETTINGS
from synclane_provider.core.declare.retry import Jitter, RetryPolicy


def paged(total: int, size: int = 50) -> Callable[[Job], Page]:
    """A handler over ``total`` records, ``size`` per page; the cursor is the offset of the next page."""

    def handler(job: Job) -> Page:
        offset = int(job.cursor or 0)
        count = min(size, total - offset)
        following = offset + count
        return Page(str(following) if following < total else None, count)

    return handler


def failing(exc: BaseException) -> Callable[[Job], Page]:
    def handler(job: Job) -> Page:
        raise exc

    return handler


class Recorder:
    """A handler wrapper that remembers every page call (job id, cursor), thread-safely."""

    def __init__(self, handler: Callable[[Job], Page]) -> None:
        self.handler = handler
        self.calls: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> Page:
        with self._lock:
            self.calls.append((job.id, job.cursor))
        return self.handler(job)


def owners(*specs: str | Owner) -> Callable[[str], list]:
    listed = list(specs)
    return lambda queue: listed


def declare(schema: str, *types, queue: str = "shops", owner_source=None, jitter=Jitter.NONE, **settings) -> SyncLane:
    """One queue of ``types`` in ``schema``. Its retry delays are exact unless a test asks for ``jitter``, so that
    tests can say how long a job waits; the retry settings are given the way a user gives them one by one."""
    retry = settings.pop("retry", None) or RetryPolicy(
        jitter=jitter, **{name: settings.pop(name) for name in RETRY_SETTINGS if name in settings}
    )
    return SyncLane(
        queues=[Queue(queue, owners=owner_source or owners("acme"), types=list(types), retry=retry, **settings)],
        schema=schema,
    )


def orders(handler=None, **overrides) -> WindowedType:
    settings = dict(
        horizon=timedelta(days=60), slice=timedelta(days=30), every=timedelta(minutes=15), overlap=timedelta(minutes=5)
    )
    settings.update(overrides)
    return WindowedType("orders", handler or paged(0), **settings)


def products(handler=None, every=timedelta(days=1), **settings) -> SnapshotType:
    return SnapshotType("products", handler or paged(0), every=every, **settings)


def rows(
    conn: psycopg.Connection, schema: str, where: str = "true", params: Iterable = (), order: str = "id"
) -> list[dict]:
    """Rows of the schema's jobs table; ``where`` and ``order`` are SQL written by the test itself."""
    query = sql.SQL("SELECT * FROM {}.jobs WHERE " + where + " ORDER BY " + order).format(sql.Identifier(schema))
    return conn.execute(query, list(params)).fetchall()


def execute(conn: psycopg.Connection, schema: str, statement: str, params: Iterable = ()) -> None:
    """Run ``statement`` with ``{jobs}``, ``{coverage}``, ``{owners}`` and ``{marks}`` standing for the schema's
    tables."""
    conn.execute(
        sql.SQL(statement).format(
            jobs=sql.SQL("{}.jobs").format(sql.Identifier(schema)),
            coverage=sql.SQL("{}.coverage").format(sql.Identifier(schema)),
            owners=sql.SQL("{}.owners").format(sql.Identifier(schema)),
            marks=sql.SQL("{}.marks").format(sql.Identifier(schema)),
        ),
        list(params),
    )


class Background:
    """A call running on a thread of its own, whose result -- or exception -- comes back from :meth:`result`.

    A test that starts a thread must see what the thread raised: an exception that stays in the thread
    would let a crashed worker or planner look like one that did nothing wrong.
    """

    def __init__(self, call: Callable[[], object], *, name: str = "background") -> None:
        self._call = call
        self._value: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread by result()
            self._error = exc

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout: float = 60.0) -> object:
        """The call's return value once it ended; what it raised is raised here; a call still running fails."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"{self._thread.name} still running after {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        return self._value


def race(calls: Iterable[Callable[[], object]], *, timeout: float = 120.0) -> list:
    """Run every call on its own thread, all released at once by a barrier; their results in order.

    The first exception any of them raised is raised here, after all have ended.
    """
    calls = list(calls)
    start = threading.Barrier(len(calls))

    def released(call: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            start.wait()
            return call()

        return run

    running = [Background(released(call), name=f"racer-{n}") for n, call in enumerate(calls)]
    outcomes: list = []
    first_error: BaseException | None = None
    for racer in running:
        try:
            outcomes.append(racer.result(timeout))
        except BaseException as exc:  # noqa: BLE001 - the first one is raised once every racer ended
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return outcomes


def connections_open(
    admin: psycopg.Connection,
    *,
    database: str | None = None,
    application: str | None = None,
    user: str | None = None,
    settle: float = 2.0,
) -> list[dict]:
    """The server's client connections to ``database``, named ``application`` or of ``user``, once closed ones are gone.

    A client that closed its connection leaves ``pg_stat_activity`` a moment later, when its backend exits:
    an empty answer comes as soon as it is seen, a non-empty one only after ``settle`` seconds.
    """
    deadline = time.monotonic() + settle
    while True:
        found = admin.execute(
            "SELECT application_name, state, query FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND (%(database)s::text IS NULL OR datname = %(database)s)"
            " AND (%(application)s::text IS NULL OR application_name = %(application)s)"
            " AND (%(user)s::text IS NULL OR usename = %(user)s)",
            {"database": database, "application": application, "user": user},
        ).fetchall()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)
