"""A worker slot's work on a thread of its own, its handler's pages included, watched from the calling thread.

A handler blocked on a call without a timeout would otherwise hold its worker, its lease and its lane for
ever. So a slot's work -- taking jobs, calling the handler page by page, saving cursors, finishing -- runs on
its work thread, and the thread that asked for the work only watches it: every ``WAKE_EVERY`` it looks at the
page in flight, if any. A page that runs past its type's ``page_timeout`` ends the attempt (the job fails
with :class:`PageTimeout` at its cursor and is retried later); a page still running when the job's lease is
lost, or after the slot's stop grace once it is asked to stop (or the much shorter interrupt grace when its
process is about to be killed), is left behind with :class:`PageLeftBehind`. Either way the work thread is
abandoned inside the handler -- a daemon thread whose late answer is thrown away -- and the work goes on
from there on a new one.

That is possible because the work is a generator: it asks for each page by yielding a :class:`PageCall`,
and the work thread calls the handler itself, between two steps of the generator. While the handler runs
the generator is suspended, so the watching thread can hand it, with the exception that ended its page, to
a new thread. One lock decides between the two: the work thread takes it as its page returns, the watcher
as it leaves the page behind, and a work thread that finds itself left behind drops its answer and ends.

Pages and jobs follow each other on the work thread with no hand-over between threads: a slot pays two
thread switches per call of :meth:`WorkThread.run` (one per job for ``run_one``, one per pool's life for
:class:`~synclane_provider.core.run.pool.WorkerPool`), not two per page.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import PageTimeout
from synclane_provider.core.page_context import PageJob
from synclane_provider.core.run import waits
from synclane_provider.core.run.page_loop import start_page
from synclane_provider.core.run.waits import Wait
from synclane_provider.core.run.write_end import WriteEnd

WAKE_EVERY = 0.5
"""Longest wait between two looks at the page in flight (its clock, its lease and the stop flag), in seconds."""

T = TypeVar("T")


class PageLeftBehind(Exception):
    """The slot stopped waiting for a page that is still running (its lease was lost, or it was asked to stop)."""


class WorkLeft(BaseException):
    """Thrown into a work that is abandoned for good: its page outlived the grace after an interrupt.

    It unwinds the work without a write (no job is handed back while its page may still be sending
    requests); a :class:`BaseException`, so that no handler of failures takes it for one.
    """


@dataclass(frozen=True, slots=True)
class PageCall:
    """A page the work asks its thread to run: ``handler(job)``, within ``timeout`` seconds while the lease holds."""

    handler: Callable[[PageJob], object]
    job: PageJob
    """The job's row with its page's context: what the handler may do during this page."""
    timeout: float
    describe: Callable[[], str]
    """Names the job in the warning a long page gets."""
    lease_lost: Callable[[], bool]
    asynchronous: bool = False
    """``handler`` is an ``async def``: its page runs on the process's loop (see core.run.page_loop)."""


def asynchronous(handler: object) -> bool:
    """Whether ``handler`` is an ``async def`` function (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


Work = Generator[PageCall | Wait | WriteEnd, Any, T]
"""A slot's work: yields the pages it needs run, the waits between them (see core.run.waits) and the write that ends
its attempt (see core.run.write_end); is sent each page's value (or thrown what it raised), each wait's seconds
slept and what the write wrote."""

Answer = tuple[Any, BaseException | None]
"""What a work thread hands back: the work's value, or what it raised."""

Task = tuple[Work[Any], BaseException | None]
"""A work to run, and what to throw into it first (None to start or resume it with nothing)."""


@dataclass(frozen=True)
class Graces:
    """When a slot stops waiting for a page in flight, besides its timeout and its lease: ``stop_grace`` after it was
    asked to ``stop``, ``interrupt_grace`` after its process was found about to be killed (``interrupted``); and how
    long an interrupt raised into the waiting thread waits for the work to reach the end of its page (and hand its
    job back) before it abandons the work (``finish_grace``)."""

    stop: threading.Event
    stop_grace: float
    interrupted: threading.Event
    interrupt_grace: float
    finish_grace: float


class InFlight:
    """A page being run, as the thread that watches it sees it."""

    __slots__ = ("work", "call", "started", "warned", "stopped_at", "interrupted_at", "cancel")

    def __init__(self, work: Work[Any], call: PageCall) -> None:
        self.work = work
        self.call = call
        self.started = time.monotonic()
        self.warned = False
        self.stopped_at: float | None = None
        self.interrupted_at: float | None = None
        self.cancel: Callable[[], object] | None = None
        """Cancels an async page on the loop, once it is left behind."""

    def why_end(self, graces: Graces) -> Exception | None:
        """What ends this page now: its timeout, its lost lease, the stop or the interrupt outlived; None: nothing."""
        now = time.monotonic()
        if now - self.started >= self.call.timeout:
            return PageTimeout(f"the page did not return within {_seconds(self.call.timeout)}")
        if self.call.lease_lost():
            return PageLeftBehind("the job's lease was lost while the page ran")
        if graces.interrupted.is_set():
            self.interrupted_at = self.interrupted_at if self.interrupted_at is not None else now
            if now - self.interrupted_at >= graces.interrupt_grace:
                return PageLeftBehind(
                    f"interrupted, and the page was still running {_seconds(graces.interrupt_grace)} later"
                )
        if graces.stop.is_set():
            self.stopped_at = self.stopped_at if self.stopped_at is not None else now
            if now - self.stopped_at >= graces.stop_grace:
                return PageLeftBehind(
                    f"asked to stop, and the page was still running {_seconds(graces.stop_grace)} later"
                )
        return None

    def half_gone(self) -> bool:
        """Whether the page has just passed half its timeout (true once): the time to warn of it."""
        if self.warned or time.monotonic() - self.started < self.call.timeout / 2:
            return False
        self.warned = True
        return True

    def warn(self, log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
        log.warning(
            "%s: the page has run for %s (its timeout is %s)",
            self.call.describe(),
            _seconds(time.monotonic() - self.started),
            _seconds(self.call.timeout),
        )


class WorkThread:
    """One worker slot's work thread, replaced when a page is left behind."""

    def __init__(
        self, name: str, log: logging.Logger | logging.LoggerAdapter[logging.Logger], *, graces: Graces
    ) -> None:
        self._name = name
        self._log = log
        self._graces = graces
        self._stop = graces.stop
        self._lock = threading.Lock()
        self._generation = 0
        """Which work thread is the live one; a thread of an older generation was left behind."""
        self._page: InFlight | None = None
        self._interrupt: BaseException | None = None
        """Raised into the waiting thread: thrown into the work at its next page boundary."""
        self._inbox: queue.SimpleQueue[Task | None] | None = None
        self._outbox: queue.SimpleQueue[Answer] | None = None
        self.left_behind = 0
        """Pages this slot stopped waiting for, each on a thread of its own that may still be running."""
        self.started = 0
        """Work threads started."""

    def run(self, work: Work[T]) -> T:
        """Run ``work`` on the work thread and watch its pages from here until it ends: its value, or what it raised.

        An exception raised into this thread meanwhile (Ctrl-C, a task timeout) is thrown into the work when
        its page returns (or before its next page), so that the work hands its job back only once no page of
        it is running; the exception is then raised here. A page still running ``finish_grace`` later is left
        behind and the work abandoned, writing nothing more.
        """
        with self._lock:
            self._interrupt = None
            inbox = self._start()
        inbox.put((work, None))
        try:
            value, error = self._answer()
        except BaseException as interrupt:  # noqa: BLE001 - raised into this thread; re-raised below
            self._finish_after(interrupt)
            raise
        if error is not None:
            raise error
        result: T = value  # the value the work returned
        return result

    def close(self) -> None:
        """Let the work thread end once it is idle (a thread left behind ends when its page does)."""
        with self._lock:
            inbox, self._inbox, self._outbox = self._inbox, None, None
        if inbox is not None:
            inbox.put(None)

    def _start(self) -> queue.SimpleQueue[Task | None]:
        """The live work thread's inbox, the thread started first if there is none (called under the lock)."""
        if self._inbox is None:
            self._inbox, self._outbox = queue.SimpleQueue(), queue.SimpleQueue()
            self.started += 1
            threading.Thread(
                target=self._serve,
                args=(self._inbox, self._outbox, self._generation),
                name=f"{self._name}-work",
                daemon=True,
            ).start()
        return self._inbox

    def _answer(self) -> Answer:
        """Wait for the work's answer, looking at its page in flight every ``WAKE_EVERY``."""
        while True:
            outbox = self._outbox
            assert outbox is not None, "a work is running, so a work thread is live"
            try:
                return outbox.get(timeout=WAKE_EVERY)
            except queue.Empty:
                pass
            self._look()

    def _look(self) -> None:
        """Leave the page in flight behind when it must end; warn once when it has run for half its timeout."""
        warn: InFlight | None = None
        with self._lock:
            page = self._page
            if page is None:
                return
            ended = page.why_end(self._graces)
            if ended is not None:
                self._leave_behind()
                self._start().put((page.work, ended))  # the work goes on at once, on a new thread
            elif page.half_gone():
                warn = page
        if warn is not None:
            warn.warn(self._log)

    def _leave_behind(self) -> None:
        """Abandon the live work thread (called under the lock): it ends when it next looks, its answer unread; an
        async page is cancelled."""
        self._generation += 1
        if self._page is not None and self._page.cancel is not None:
            self._page.cancel()
        self._page = None
        self.left_behind += 1
        inbox, self._inbox, self._outbox = self._inbox, None, None
        if inbox is not None:
            inbox.put(None)

    def _finish_after(self, interrupt: BaseException) -> None:
        """Let the work end on ``interrupt`` within the finish grace, or abandon it (it then writes nothing more)."""
        with self._lock:
            self._interrupt = interrupt
            outbox = self._outbox
        if outbox is not None:
            try:
                outbox.get(timeout=self._graces.finish_grace)  # the work ends on the interrupt (or had just ended)
                return
            except queue.Empty:
                pass
        with self._lock:
            page = self._page
            self._interrupt = None
            self._leave_behind()  # a work still between pages unwinds with WorkLeft at its next one
        if page is not None:
            try:
                page.work.throw(WorkLeft())
            except BaseException:  # noqa: BLE001 - the interrupt raised by run() is what the caller hears of
                pass

    def _serve(self, inbox: queue.SimpleQueue[Task | None], outbox: queue.SimpleQueue[Answer], generation: int) -> None:
        while (task := inbox.get()) is not None:
            answer = self._drive(*task, generation=generation)
            if answer is None:
                return  # left behind
            outbox.put(answer)

    def _drive(self, work: Work[Any], throw: BaseException | None, *, generation: int) -> Answer | None:
        """Step ``work`` through its pages until it ends: its answer, or None once this thread was left behind."""
        send: Any = None
        while True:
            try:
                call = work.send(send) if throw is None else work.throw(throw)
            except StopIteration as end:
                return end.value, None
            except BaseException as exc:  # noqa: BLE001 - the work's own failure, raised in the waiting thread
                return None, exc
            if isinstance(call, Wait):
                send, throw = waits.slept_on(call, self._stop), None
                continue
            if isinstance(call, WriteEnd):
                try:
                    send, throw = call.write(), None
                except BaseException as exc:  # noqa: BLE001 - thrown into the work, where the write was asked for
                    send, throw = None, exc
                continue
            with self._lock:
                if generation != self._generation:  # abandoned for good between pages: unwind without a write
                    send, throw = None, WorkLeft()
                    continue
                if self._interrupt is not None:
                    send, throw, self._interrupt = None, self._interrupt, None
                    continue
                self._page = InFlight(work, call)
            try:
                send, throw = self._page_answer(call, generation), None
            except BaseException as exc:  # noqa: BLE001 - thrown into the work, which decides
                send, throw = None, exc
            with self._lock:
                if generation != self._generation:
                    return None  # the page was left behind and the work went on without it
                self._page = None
                if self._interrupt is not None:
                    send, throw, self._interrupt = None, self._interrupt, None

    def _page_answer(self, call: PageCall, generation: int) -> Any:
        """Run the page here, or on the process's loop for an async handler (cancelled if it is left behind)."""
        if not call.asynchronous:
            return call.handler(call.job)
        future = start_page(call.handler(call.job))  # type: ignore[arg-type]
        with self._lock:
            if generation == self._generation and self._page is not None:
                self._page.cancel = future.cancel
            else:
                future.cancel()
        return future.result()


def _seconds(seconds: float) -> str:
    return duration_text(timedelta(seconds=round(seconds, 1)))
