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
from datetime import timedelta
from typing import Any

from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import PageTimeout

WAKE_EVERY = 0.5
"""Longest wait between two looks at the clock, the lease and the stop flag while a page runs, in seconds."""


class PageLeftBehind(Exception):
    """The slot stopped waiting for a page that is still running (its lease was lost, or it was asked to stop)."""


Answer = tuple[Any, BaseException | None]
"""What a page thread hands back: the handler's value, or what it raised."""


def _serve(
    inbox: queue.SimpleQueue[tuple[Callable[[Any], Any], Any] | None], outbox: queue.SimpleQueue[Answer]
) -> None:
    while (call := inbox.get()) is not None:
        handler, job = call
        try:
            answer: Answer = (handler(job), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting slot, which decides
            answer = (None, exc)
        outbox.put(answer)


class PageThread:
    """One worker slot's page thread, replaced when a page is left behind.

    The slot and its thread talk through two queues, one each way, made once per thread: a page costs two
    puts and two gets, no thread, lock or event of its own. So that a late answer is never read as the next
    page's, a thread whose page was not waited to its end is left behind with its queues.
    """

    def __init__(self, name: str, log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
        self._name = name
        self._log = log
        self._inbox: queue.SimpleQueue[tuple[Callable[[Any], Any], Any] | None] | None = None
        self._outbox: queue.SimpleQueue[Answer] | None = None
        self._in_flight = False
        """A page was handed over and its answer not read yet (the waiting thread was interrupted)."""
        self.left_behind = 0
        """Pages this slot stopped waiting for, each on a thread of its own that may still be running."""
        self.started = 0
        """Page threads started."""

    def call(
        self,
        handler: Callable[[Any], Any],
        job: Any,
        *,
        timeout: float,
        describe: Callable[[], str],
        lease_lost: Callable[[], bool],
        stop: threading.Event,
        stop_grace: float,
        interrupted: threading.Event | None = None,
        interrupt_grace: float = 0.0,
    ) -> Any:
        """``handler(job)`` on the page thread: its value, or what it raised, raised here.

        Raises :class:`PageTimeout` after ``timeout`` seconds, and :class:`PageLeftBehind` when the lease is
        lost, ``stop`` has been set for ``stop_grace`` seconds or ``interrupted`` for ``interrupt_grace``
        seconds, leaving the page's thread behind. Logs a warning, naming the job by ``describe()``, once the
        page has run for half its timeout.
        """
        if self._in_flight:
            self._leave_behind()  # an interrupted page never answered: its answer must not be taken for this one
        inbox, outbox = self._start()
        inbox.put((handler, job))
        self._in_flight = True
        started = time.monotonic()
        warned = False
        stopped_at: float | None = None
        interrupted_at: float | None = None
        while True:
            try:
                value, error = outbox.get(timeout=WAKE_EVERY)
                break
            except queue.Empty:
                pass
            ran = time.monotonic() - started
            if not warned and ran >= timeout / 2:
                warned = True
                self._log.warning(
                    "%s: the page has run for %s (its timeout is %s)", describe(), _seconds(ran), _seconds(timeout)
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
                    raise PageLeftBehind(f"asked to stop, and the page was still running {_seconds(stop_grace)} later")
        self._in_flight = False
        if error is not None:
            raise error
        return value

    def finish_current(self, within: float) -> bool:
        """Whether a page in flight (one interrupted in the waiting thread) ended within ``within`` seconds.

        Its answer is thrown away. A page still running then is left behind.
        """
        if not self._in_flight or self._outbox is None:
            return True
        try:
            self._outbox.get(timeout=within)
        except queue.Empty:
            self._leave_behind()
            return False
        self._in_flight = False
        return True

    def close(self) -> None:
        """Let the page thread end once it is idle (a thread left behind ends when its page does)."""
        inbox, self._inbox, self._outbox = self._inbox, None, None
        if inbox is not None:
            inbox.put(None)

    def _start(self) -> tuple[queue.SimpleQueue[tuple[Callable[[Any], Any], Any] | None], queue.SimpleQueue[Answer]]:
        if self._inbox is None or self._outbox is None:
            self._inbox, self._outbox = queue.SimpleQueue(), queue.SimpleQueue()
            self.started += 1
            threading.Thread(
                target=_serve, args=(self._inbox, self._outbox), name=f"{self._name}-page", daemon=True
            ).start()
        return self._inbox, self._outbox

    def _leave_behind(self) -> None:
        """Abandon the thread running the current page: its answer is never read; the next page gets a new one."""
        self.left_behind += 1
        self._in_flight = False
        inbox, self._inbox, self._outbox = self._inbox, None, None
        if inbox is not None:
            inbox.put(None)  # the thread ends after its page, if that ever returns


def _seconds(seconds: float) -> str:
    return duration_text(timedelta(seconds=round(seconds, 1)))
