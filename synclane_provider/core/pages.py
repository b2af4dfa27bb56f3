"""Calling a handler for one page on a thread of its own, so that a page that never returns can be left behind.

A handler blocked on a call without a timeout would otherwise hold its worker, its lease and its lane for
ever. Each worker slot hands its pages to one page thread and waits for the answer; a page that runs past
its type's ``page_timeout`` ends the attempt (the job fails with :class:`PageTimeout` at its cursor and is
retried later) and its thread is abandoned: it is a daemon thread, its late answer is thrown away, and the
slot's next page goes to a new thread. The wait also ends early when the job's lease is lost, or when the
slot is asked to stop and the page is still running after the slot's stop grace (or, when its process is
about to be killed, after the much shorter interrupt grace).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import PageTimeout

WAKE_EVERY = 0.5
"""Longest wait between two looks at the clock, the lease and the stop flag while a page runs, in seconds."""


class PageLeftBehind(Exception):
    """The slot stopped waiting for a page that is still running (its lease was lost, or it was asked to stop)."""


@dataclass
class _Call:
    handler: Callable[[Any], Any]
    job: Any
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None


def _serve(inbox: queue.SimpleQueue[_Call | None]) -> None:
    while (call := inbox.get()) is not None:
        try:
            call.value = call.handler(call.job)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting slot, which decides
            call.error = exc
        call.done.set()


class PageThread:
    """One worker slot's page thread, replaced when a page is left behind."""

    def __init__(self, name: str, log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
        self._name = name
        self._log = log
        self._inbox: queue.SimpleQueue[_Call | None] | None = None
        self._current: _Call | None = None
        self.left_behind = 0
        """Pages this slot stopped waiting for, each on a thread of its own that may still be running."""

    def call(
        self,
        handler: Callable[[Any], Any],
        job: Any,
        *,
        timeout: float,
        describe: str,
        lease_lost: Callable[[], bool],
        stop: threading.Event,
        stop_grace: float,
        interrupted: threading.Event | None = None,
        interrupt_grace: float = 0.0,
    ) -> Any:
        """``handler(job)`` on the page thread: its value, or what it raised, raised here.

        Raises :class:`PageTimeout` after ``timeout`` seconds, and :class:`PageLeftBehind` when the lease is
        lost, ``stop`` has been set for ``stop_grace`` seconds or ``interrupted`` for ``interrupt_grace``
        seconds, leaving the page's thread behind. Logs a warning once the page has run for half its timeout.
        """
        call = _Call(handler, job)
        self._current = call
        self._start().put(call)
        started = time.monotonic()
        warned = False
        stopped_at: float | None = None
        interrupted_at: float | None = None
        try:
            while not call.done.wait(WAKE_EVERY):
                ran = time.monotonic() - started
                if not warned and ran >= timeout / 2:
                    warned = True
                    self._log.warning(
                        "%s: the page has run for %s (its timeout is %s)", describe, _seconds(ran), _seconds(timeout)
                    )
                if ran >= timeout:
                    self._leave_behind()
                    raise PageTimeout(f"the page did not return within {_seconds(timeout)}")
                if lease_lost():
                    self._leave_behind()
                    raise PageLeftBehind("the job's lease was lost while the page ran")
                if interrupted is not None and interrupted.is_set():
                    interrupted_at = interrupted_at if interrupted_at is not None else time.monotonic()
                    if time.monotonic() - interrupted_at >= interrupt_grace:
                        self._leave_behind()
                        raise PageLeftBehind(
                            f"interrupted, and the page was still running {_seconds(interrupt_grace)} later"
                        )
                if stop.is_set():
                    stopped_at = stopped_at if stopped_at is not None else time.monotonic()
                    if time.monotonic() - stopped_at >= stop_grace:
                        self._leave_behind()
                        raise PageLeftBehind(
                            f"asked to stop, and the page was still running {_seconds(stop_grace)} later"
                        )
        finally:
            self._current = None
        if call.error is not None:
            raise call.error
        return call.value

    def finish_current(self, within: float) -> bool:
        """Whether a page in flight (one interrupted in the waiting thread) ended within ``within`` seconds."""
        call = self._current
        return call is None or call.done.wait(within)

    def close(self) -> None:
        """Let the page thread end once it is idle (a thread left behind ends when its page does)."""
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            inbox.put(None)

    def _start(self) -> queue.SimpleQueue[_Call | None]:
        if self._inbox is None:
            self._inbox = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(self._inbox,), name=f"{self._name}-page", daemon=True).start()
        return self._inbox

    def _leave_behind(self) -> None:
        """Abandon the thread running the current page: its answer is never read; the next page gets a new one."""
        self.left_behind += 1
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            inbox.put(None)  # the thread ends after its page, if that ever returns


def _seconds(seconds: float) -> str:
    return duration_text(timedelta(seconds=round(seconds, 1)))
