"""The soak's fake API: serves each job's pages over HTTP and writes down every call, as the far side sees it.

The checks must not trust the workers (they are killed mid-sentence) nor the table (an immediate restart
may lose what a worker was told was committed): the API is the witness. Each call is recorded with the
job, the lane, the page asked for, the worker process that asked and the call's interval on the machine's
monotonic clock (shared by every process), from which the checks count lost pages, duplicates and lanes
served twice at once.

A job's pages are a pure function of its id (1 to 5 pages of 10 records), so the checker knows what a job
should have been served without asking anyone.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PAGE_RECORDS = 10


def pages_of(job_id: int) -> int:
    """How many pages the API serves for a job: 1 to 5."""
    return 1 + (job_id * 7919) % 5


def page_index(cursor: str | None) -> int:
    """The page a cursor points at: None (a job's start) is page 0, "k" is page k."""
    return int(cursor) if cursor else 0


@dataclass(frozen=True)
class Call:
    """One page served: which job, lane and page, to which worker process, from when to when."""

    job: int
    lane: str
    page: int
    pid: int
    started: float
    ended: float


class FakeApi:
    """A threaded HTTP server on 127.0.0.1 whose ``GET /page`` serves one page after a short latency."""

    def __init__(self, *, latency: tuple[float, float] = (0.001, 0.006), seed: int = 0) -> None:
        self.calls: list[Call] = []
        self.errors: list[str] = []
        """Tracebacks of requests the API failed to serve for a reason of its own (the soak reports them)."""
        self._lock = threading.Lock()
        self._latency = latency
        self._random = random.Random(seed)
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a worker thread reuses its connection

            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                api._serve(self)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                error = sys.exc_info()[1]
                if not isinstance(error, ConnectionError):  # a worker killed mid-call: that is the soak
                    api.errors.append(traceback.format_exc())

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-api", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        started = time.monotonic()
        query = {key: values[0] for key, values in parse_qs(urlsplit(request.path).query).items()}
        job, page = int(query["job"]), page_index(query.get("cursor"))
        with self._lock:
            wait = self._random.uniform(*self._latency)
        time.sleep(wait)
        following = page + 1
        body = json.dumps(
            {"next": str(following) if following < pages_of(job) else None, "count": PAGE_RECORDS}
        ).encode()
        ended = time.monotonic()
        with self._lock:
            self.calls.append(Call(job, query["lane"], page, int(query["pid"]), started, ended))
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
