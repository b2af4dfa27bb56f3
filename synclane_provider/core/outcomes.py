"""What happens to a job after an attempt fails: the retry, throttle, defer and abandon policy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from synclane_provider.core.declarations import Queue
from synclane_provider.core.delays import backoff
from synclane_provider.core.errors import JobAbandoned, JobThrottled, WorkerLost
from synclane_provider.core.states import JobStatus

MAX_ERROR_LENGTH = 2000
"""Stored errors are cut to this many characters: the row is for reading, not for full tracebacks."""


@dataclass(frozen=True)
class Failure:
    """The state a failed attempt leaves its job in."""

    status: JobStatus
    delay: timedelta
    error: str


def decide_failure(queue: Queue, attempt: int, exc: BaseException) -> Failure:
    """Where a job goes after attempt number ``attempt`` raised ``exc``.

    Attempts below ``max_attempts`` fail and wait (doubling, capped; throttles
    use their own delay, or exactly the wait the server named). The attempt that
    uses up ``max_attempts`` defers the job: it waits the same way and then only
    runs when nothing else in its lane is due. The attempt after that, or an
    explicit :class:`JobAbandoned`, abandons it until a person requeues it --
    unless that last attempt was throttled: the server only said "not now",
    so the job stays deferred and keeps its last attempt for later.
    """
    error = describe_error(exc)
    throttled = isinstance(exc, JobThrottled)
    if isinstance(exc, JobAbandoned) or (attempt > queue.max_attempts and not throttled):
        return Failure(JobStatus.ABANDONED, timedelta(0), error)
    if throttled:
        delay = exc.retry_after if exc.retry_after is not None else backoff(
            attempt, queue.throttle_delay, queue.throttle_max_delay
        )
    else:
        delay = backoff(attempt, queue.retry_delay, queue.retry_max_delay)
    status = JobStatus.DEFERRED if attempt >= queue.max_attempts else JobStatus.FAILED
    return Failure(status, delay, error)


def describe_error(exc: BaseException) -> str:
    """``Type: message``, safe to store: bounded, valid UTF-8, no NUL characters."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the failure itself
        message = f"<unprintable {type(exc).__name__}>"
    return storable_text(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def storable_text(text: str) -> str:
    """``text`` as the error column keeps it: at most ``MAX_ERROR_LENGTH`` characters, valid UTF-8, no NUL."""
    text = text.encode("utf-8", errors="replace").decode("utf-8", errors="replace").replace("\x00", "\\0")
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 1] + "…"
    return text


_LOST_BEFORE = re.compile(r"^WorkerLost: .*\(lost (\d+) time\(s\) in a row\)$", re.DOTALL)


def lost_attempt(previous_error: str | None, *, worker: str, cursor: str | None) -> WorkerLost:
    """What a worker that took a job over writes down for the attempt its lost worker never finished.

    Counts the attempts lost in a row from the job's previous error, so that a page that kills its worker
    every time says so on the row.
    """
    earlier = _LOST_BEFORE.match(previous_error or "")
    times = int(earlier.group(1)) + 1 if earlier else 1
    where = f"at cursor {cursor!r}" if cursor is not None else "on its first page"
    return WorkerLost(f"worker {worker} stopped renewing its lease {where} (lost {times} time(s) in a row)")
