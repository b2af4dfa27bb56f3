"""A fake API that logs every request's arrival, and the rate-budget run: workers in two processes, one lane.

Used by the test suite (no more than the budget in any window, at least 90 % of it used, and the same run
overrunning with the budget statement taken out) and by ``bench/ratelimit.py``. The worker processes run
``tests/support/budget_worker.py``, whose declaration is :func:`declaration` here; ``bench/adaptive_rate.py`` runs
them against an API of its own (any that :class:`Answers` can be served).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.request import urlopen

from synclane_provider.core import (
    Job,
    JobThrottled,
    Operations,
    Owner,
    Page,
    Queue,
    Rate,
    SnapshotType,
    SyncLane,
    parse_retry_after,
)
from synclane_provider.core.declare.retry import Jitter, RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "support" / "budget_worker.py"
QUEUE = "api"
WARM_UP = timedelta(seconds=3)
"""How long after the jobs are enqueued they are due: time for the worker processes to start and warm up."""
WARM_UP_ACCOUNT = "warm-up"
OWNERS = (Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme"))
"""Two owners sharing one lane (one API account): the workers draw on one budget for both."""
ACCOUNTS = tuple(owner.id for owner in OWNERS)


@dataclass
class Throttle:
    """The API's own limit on one account (the owners in ``accounts`` share it): its ``after``-th request is
    answered 429 naming ``retry_after`` seconds, and so is every request of the account until they have passed."""

    accounts: tuple[str, ...]
    after: int
    retry_after: int = 1
    blocked_until: float = 0.0


@dataclass(frozen=True)
class Limit:
    """The API's rate limit on one account (the owners in ``accounts`` share it), as a strict API keeps it: a
    request that makes more than ``requests`` in the last ``per`` seconds (a sliding window, counted from when
    each connection was accepted) is refused with 429 and counted in :attr:`FakeAPI.over_limit`."""

    accounts: tuple[str, ...]
    requests: int
    per: float


@dataclass
class FakeAPI:
    """Answers ``GET /<account>/<page>`` with 200 (or 429 when its throttle or limit says so), logging each arrival.

    An arrival is when the server accepted the request's connection, not when a request thread got round to it:
    a busy machine delays the thread, and then the log would show the requests further apart than they came.
    """

    throttle: Throttle | None = None
    limit: Limit | None = None
    latency: float = 0.0
    """Seconds each answer takes (after its arrival is logged)."""
    log: list[tuple[float, str, int]] = field(default_factory=list)
    """(monotonic arrival time, account, status) per request, in the order they were answered."""
    over_limit: int = 0
    """Requests refused by :attr:`limit`."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, account: str, arrived: float | None = None) -> int:
        with self._lock:
            now = time.monotonic() if arrived is None else arrived
            status = 200
            throttle = self.throttle
            if throttle is not None and account in throttle.accounts:
                seen = sum(1 for _, a, _ in self.log if a in throttle.accounts)
                if now < throttle.blocked_until or (seen + 1 == throttle.after and not throttle.blocked_until):
                    status = 429
                    if not throttle.blocked_until:
                        throttle.blocked_until = now + throttle.retry_after
            limit = self.limit
            if limit is not None and account in limit.accounts:
                within = sum(1 for t, a, _ in self.log if a in limit.accounts and now - limit.per < t <= now)
                if within + 1 > limit.requests:
                    status = 429
                    self.over_limit += 1
            self.log.append((now, account, status))
            return status

    def respond(self, account: str, arrived: float | None) -> tuple[int, dict[str, str]]:
        """The answer's status and headers (``Retry-After`` on a 429)."""
        status = self.answer(account, arrived)
        retry_after = self.throttle.retry_after if self.throttle else 1
        return status, {"Retry-After": str(retry_after)} if status == 429 else {}

    def times(self, account: str | None = None, status: int | None = None) -> list[float]:
        with self._lock:
            return [t for t, a, s in self.log if (account is None or a == account) and (status is None or s == status)]

    def serve(self) -> "Served":
        return Served(self)


class AcceptTimes(ThreadingHTTPServer):
    """An HTTP server that notes when it accepted each connection (before a thread is started for it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accepted: dict[int, float] = {}
        self._lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        with self._lock:
            self._accepted[id(connection)] = time.monotonic()
        return connection, address

    def accepted_at(self, connection: socket.socket) -> float | None:
        with self._lock:
            return self._accepted.get(id(connection))

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._accepted.pop(id(request), None)
        super().shutdown_request(request)


class Answers(Protocol):
    """What :class:`Served` asks of an API: each request's status and headers, from its account and its arrival (the
    monotonic instant its connection was accepted), and how long to take over each answer."""

    latency: float

    def respond(self, account: str, arrived: float | None) -> tuple[int, dict[str, str]]: ...


class Served:
    """An API (:class:`FakeAPI`, or another that :class:`Answers`) on a local HTTP server, on a thread, until closed.

    It answers ``GET /<account>/<anything>`` with the API's status and headers, and a small JSON body."""

    def __init__(self, api: Answers) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the base class's name
                account = self.path.strip("/").split("/")[0]
                status, headers = api.respond(account, server.accepted_at(self.connection))
                time.sleep(api.latency)
                body = json.dumps({"ok": status == 200}).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.api = api
        self.server = server = AcceptTimes(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def handler(url: str, *, pages: int, requests_per_page: int, observe: bool = False) -> object:
    """A page of ``requests_per_page`` requests to the API (the first paid by the worker, the rest by
    ``job.spend()``); a 429 raises ``JobThrottled`` with the wait it names. With ``observe``, every answer's
    headers (a 429's too) are handed to ``job.observe()``, which steers the lane's budget from them."""

    def page(job: Job) -> Page:
        number = int(job.cursor or 0)
        for request in range(requests_per_page):
            if request:
                job.spend()
            try:
                with urlopen(f"{url}/{job.owner}/{number}", timeout=10) as response:
                    response.read()
                    if observe:
                        job.observe(response)
            except OSError as exc:
                headers = getattr(exc, "headers", None)
                if observe and headers is not None:
                    job.observe(headers)
                if getattr(exc, "code", None) == 429 and headers is not None:
                    raise JobThrottled(
                        "the API said 429", retry_after=parse_retry_after(headers.get("Retry-After"))
                    ) from None
                raise
        following = number + 1
        return Page(str(following) if following < pages else None, 1)

    return page


def declaration(
    schema: str,
    url: str,
    *,
    rate: Rate | None,
    pages: int = 5,
    requests_per_page: int = 2,
    observe: bool = False,
    owners: tuple[Owner, ...] = OWNERS,
) -> SyncLane:
    retry = RetryPolicy(
        retry_delay=timedelta(milliseconds=200),
        retry_max_delay=timedelta(seconds=1),
        throttle_delay=timedelta(seconds=1),
        throttle_max_delay=timedelta(seconds=2),
        jitter=Jitter.NONE,
    )
    return SyncLane(
        queues=[
            Queue(
                QUEUE,
                owners=lambda queue: list(owners),
                concurrency=2,
                retry=retry,
                rate=rate,
                types=[
                    SnapshotType(
                        "items",
                        handler(url, pages=pages, requests_per_page=requests_per_page, observe=observe),
                        every=timedelta(days=1),
                    )
                ],
            )
        ],
        schema=schema,
        poll_interval=timedelta(milliseconds=200),
    )


def max_in_any_window(times: list[float], window: float = 1.0) -> int:
    """The most arrivals in any half-open window ``[t, t + window)``."""
    times = sorted(times)
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


@dataclass(frozen=True)
class BudgetRun:
    budget_per_s: float
    burst: int
    requests: int
    max_in_any_window: int
    utilisation: float
    """Requests sent over the run divided by what the budget allows over the same time (first to last request,
    plus one interval for the last one's turn)."""
    seconds: float
    over_limit: int = 0
    """Requests the API refused as over its limit (``requests + burst`` in any ``per``)."""


WORKERS = 2
"""Worker processes in a run, each with a pool of slots."""


def enqueue_due(synclane: SyncLane, database_url: str, jobs_per_owner: int) -> datetime:
    """Enqueue ``jobs_per_owner`` jobs for each owner of the lane, all due after :data:`WARM_UP`; when they are due.

    Due once both processes are up and have sent one warm-up request each (not counted): what is measured is how
    workers keep to the lane's budget, not how long a fresh process takes to its first request."""
    with Operations(synclane, synclane.database(database_url)) as ops:
        due = datetime.now(timezone.utc) + WARM_UP
        for owner in ACCOUNTS:
            for n in range(jobs_per_owner):
                ops.enqueue(QUEUE, owner, "items", key=f"run-{n}", run_at=due)
    return due


def rate_spec(rate: Rate | None) -> dict[str, Any]:
    """The lane's rate as a worker's spec names it (``requests`` None: no rate)."""
    if rate is None:
        return {"requests": None}
    return {"requests": rate.requests, "per": rate.per.total_seconds(), "burst": rate.burst, "headroom": rate.headroom}


def run_workers(
    database_url: str, schema: str, api_url: str, spec: dict[str, Any], *, slots: int, timeout: float
) -> float:
    """Run :data:`WORKERS` worker processes (``budget_worker.py``) of ``slots`` slots each with ``spec`` (the lane's
    rate, the handler's pages and settings, and when to stop) until they exit; the seconds they took. Raises
    naming each process that failed or was still running after ``timeout`` seconds, with the end of its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    workers: list[subprocess.Popen[str]] = [
        subprocess.Popen(
            [sys.executable, str(WORKER), database_url, schema, api_url, json.dumps(spec), str(slots)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(WORKERS)
    ]
    failures = []
    for worker in workers:
        try:
            out, err = worker.communicate(timeout=max(timeout - (time.monotonic() - started), 1))
        except subprocess.TimeoutExpired:
            worker.kill()
            out, err = worker.communicate()
            failures.append(f"worker {worker.pid} still running after {timeout:.0f}s:\n{err[-3000:]}")
            continue
        if worker.returncode != 0:
            failures.append(f"worker {worker.pid} exited {worker.returncode}:\n{err[-3000:]}")
    if failures:
        raise AssertionError("\n".join(failures))
    return time.monotonic() - started


def budget_run(
    database_url: str,
    schema: str,
    *,
    rate: Rate,
    jobs_per_owner: int = 2,
    pages: int = 5,
    requests_per_page: int = 2,
    slots: int = 2,
    enforce: bool = True,
    loaded: bool = False,
    wakes_late_every: int = 0,
    timeout: float = 120.0,
) -> BudgetRun:
    """Enqueue ``jobs_per_owner`` jobs for each owner of lane ``acme``, run them with two worker processes of
    ``slots`` slots each, and measure the API's request log against ``rate`` (which the workers are told to keep
    to only with ``enforce``: without, the run shows what the budget prevents). The API refuses a request over
    ``requests + burst`` in any ``per`` (counted in ``over_limit``). With ``loaded``, a busy loop per core keeps
    the machine busy throughout; with ``wakes_late_every``, every so many waits for a turn in each worker
    process end 0.3 s late."""
    limit = Limit(ACCOUNTS, rate.requests + rate.burst, rate.per.total_seconds())
    with FakeAPI(limit=limit).serve() as served, busy_loops((os.cpu_count() or 1) if loaded else 0):
        synclane = declaration(
            schema, served.url, rate=rate if enforce else None, pages=pages, requests_per_page=requests_per_page
        )
        enqueue_due(synclane, database_url, jobs_per_owner)
        spec = {
            **rate_spec(rate if enforce else None),
            "pages": pages,
            "requests_per_page": requests_per_page,
            "wakes_late_every": wakes_late_every,
        }
        seconds = run_workers(database_url, schema, served.url, spec, slots=slots, timeout=timeout)
        times = [t for account in ACCOUNTS for t in served.api.times(account)]
        warmed = len(served.api.times(WARM_UP_ACCOUNT))
        over_limit = served.api.over_limit
    if warmed != WORKERS:
        raise AssertionError(f"{warmed} of the {WORKERS} worker processes warmed up")
    times.sort()
    per_s = rate.requests / rate.per.total_seconds()
    allowed = ((times[-1] - times[0]) + rate.interval.total_seconds()) * per_s + rate.burst if times else 0
    return BudgetRun(
        per_s,
        rate.burst,
        len(times),
        max_in_any_window(times, rate.per.total_seconds()),
        len(times) / allowed if allowed else 0.0,
        seconds,
        over_limit,
    )


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """``count`` processes spinning on a core each, stopped (and reaped) on leaving."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
        for process in spinning:
            process.wait()
