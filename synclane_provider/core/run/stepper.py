"""Many jobs' works at once: their steps on a few threads, their pages on page threads or on the event loop.

A slot that runs one job at a time drives its work on one thread (:mod:`~synclane_provider.core.run.work_thread`).
A slot that runs hundreds cannot spend a thread per job on the steps between pages: a step is a statement or two,
a millisecond, and most of a job's life is its page waiting on the API. So a :class:`Stepper` drives every work
of its slot from the thread that calls :meth:`Stepper.pump`:

* **steps** (the work's code between two yields: takes, cursor saves, finishes) run on ``steps`` threads, as many
  as the slot has connections -- a step holds a connection for its statement, and more step threads would wait
  for one; a work's first step goes ahead of the steps waiting for a thread (see :meth:`Stepper._step`);
* **pages** of a plain handler run on a bounded pool of page threads (:class:`PageThreads`, one per job at most);
  those of an ``async def`` handler on the process's one event loop (:mod:`~synclane_provider.core.run.page_loop`),
  no thread of their own;
* **waits** a work yields (its turn in a lane's rate budget) are timers, holding no thread at all;
* **ends** a work yields (the write that ends its attempt) are gathered: the ends of pages that returned together
  are written in one statement on a step thread (the slot's ``write_ends``), one batch at a time, so that the
  ends that come while one is written make the next.

The pump watches every page in flight as a work thread watches its one (:meth:`InFlight.why_end`): a page past its
timeout, whose lease was lost, or still running a grace after a stop or an interrupt is left behind -- its page
thread abandoned (the pool starts another in its place), its coroutine cancelled -- and the exception that ended it
is thrown into its work, which goes on without it. A hung page holds up only its own job.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from synclane_provider.core.run.page_loop import start_page
from synclane_provider.core.run.waits import Wait
from synclane_provider.core.run.work_thread import WAKE_EVERY, Graces, InFlight, PageCall, Work, WorkLeft
from synclane_provider.core.run.write_end import WriteEnd

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]
Done = Callable[[Any, BaseException | None], None]
"""Told a page's answer: its value, or what it raised."""
Answer = tuple[Any, BaseException | None]
"""What a work is sent back: a value, or what to throw into it."""
WriteEnds = Callable[[list[WriteEnd]], list[Answer]]
"""Writes several works' ends, each one's answer in their order."""

ENDS_AT_MOST = 100
"""The most ends one batch writes (those that came meanwhile wait for the next)."""


class PageRun:
    """A plain handler's page on a page thread: ``abandoned`` once it is left behind, its answer then unheard."""

    __slots__ = ("call", "done", "abandoned")

    def __init__(self, call: PageCall, done: Done) -> None:
        self.call = call
        self.done = done
        self.abandoned = False


class PageThreads:
    """Daemon threads for plain handlers' pages, at most ``limit`` at work, started as pages need them.

    A thread whose page was left behind is abandoned: it ends when its page returns (its answer unheard), and no
    longer counts against the limit, so a hung page never holds up another job's. Daemon threads, so that a page
    that never returns does not keep the process alive either.
    """

    def __init__(self, name: str, limit: int) -> None:
        self._name = name
        self._limit = limit
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[PageRun | None] = queue.SimpleQueue()
        self._live = 0
        self._busy = 0
        self.started = 0
        """Page threads started so far (abandoned ones are replaced)."""

    def run(self, call: PageCall, done: Done) -> PageRun:
        """Run ``call``'s page on a page thread; ``done`` is told its answer there, unless it was abandoned."""
        run = PageRun(call, done)
        with self._lock:
            self._busy += 1
            if self._busy > self._live and self._live < self._limit:
                self._live += 1
                self.started += 1
                threading.Thread(target=self._serve, name=f"{self._name}-page", daemon=True).start()
        self._tasks.put(run)
        return run

    def abandon(self, run: PageRun) -> None:
        """Stop waiting for ``run``'s page: its thread ends after it, and another may start meanwhile."""
        with self._lock:
            if not run.abandoned:
                run.abandoned = True
                self._live -= 1
                self._busy -= 1

    def _serve(self) -> None:
        while (run := self._tasks.get()) is not None:
            try:
                value, error = run.call.handler(run.call.job), None
            except BaseException as exc:  # noqa: BLE001 - the page's failure, thrown into its work
                value, error = None, exc
            with self._lock:
                if run.abandoned:
                    return  # left behind: this thread was replaced
                self._busy -= 1
            run.done(value, error)

    def close(self) -> None:
        """End the idle page threads (busy ones end after their page)."""
        with self._lock:
            live = self._live
        for _ in range(live):
            self._tasks.put(None)


@dataclass(eq=False)
class Entry:
    """One work the stepper drives, with ``tag`` to tell it by when it ends."""

    work: Work[Any]
    tag: Hashable
    page: InFlight | None = None
    """The page in flight, if any."""
    generation: int = 0
    """Counts the work's pages: an answer of an earlier one (left behind) is not heard."""
    stop_page: Callable[[], object] | None = field(default=None, repr=False)
    """Abandons the page in flight (its thread, or its coroutine)."""


Ended = tuple[Hashable, Any, BaseException | None]
"""A work that ended: its tag, its value, or what it raised."""

Step = tuple[Entry, Any, BaseException | None]
"""A work's step to run: the work, and what to send it (or throw into it)."""

Task = Step | Callable[[], None]
"""What a step thread runs: a work's step, or a batch of ends to write."""

STARTING, GOING_ON, CLOSING = 0, 1, 2
"""Ranks of the queued steps: a work's first step, its later ones, and the step threads' end after both."""


class Stepper:
    """Drives many works at once for one slot (see the module's docstring)."""

    def __init__(
        self, name: str, log: Log, *, graces: Graces, steps: int, pages: int, write_ends: WriteEnds | None = None
    ) -> None:
        """``write_ends``: how the slot writes a batch of ends; None writes each alone (:meth:`WriteEnd.write`)."""
        self._name = name
        self._log = log
        self._graces = graces
        self._stop = graces.stop
        self._events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._steps: queue.PriorityQueue[tuple[int, int, Task | None]] = queue.PriorityQueue()
        """Steps to run, a work's first step ahead of the others (see :meth:`start`), else in the order they came."""
        self._step_threads = steps
        self._write_ends = write_ends or _one_by_one
        self._ends: list[tuple[Entry, WriteEnd]] = []
        """Works waiting for their ends to be written, in the order they asked."""
        self._writing = False
        """A batch of ends is being written (the next waits for it)."""
        self._started = False
        self.pages = PageThreads(name, pages)
        self._running: set[Entry] = set()
        self._timers: list[tuple[float, int, Entry, float]] = []
        """Works waiting: (when to wake them, a tie-breaker, the work, when they began to wait)."""
        self._order = itertools.count()
        self._looked_at = time.monotonic()
        self._nudged = False
        self.left_behind = 0
        """Pages the stepper stopped waiting for, each on a thread of its own (or a coroutine) that may still run."""

    @property
    def running(self) -> int:
        """Works started and not yet ended."""
        return len(self._running)

    def start(self, work: Work[Any], tag: Hashable) -> None:
        """Start driving ``work``; :meth:`pump` reports its end with ``tag``. From the pumping thread only."""
        if not self._started:
            self._started = True
            for _ in range(self._step_threads):
                threading.Thread(target=self._serve_steps, name=f"{self._name}-steps", daemon=True).start()
        entry = Entry(work, tag)
        self._running.add(entry)
        self._step(entry, None, None, first=True)

    def nudge(self) -> None:
        """Make the pump return now, even with no work ended (something outside the works changed); any thread."""
        self._events.put(("nudge", None))

    def pump(self, timeout: float) -> list[Ended]:
        """Drive the works for up to ``timeout`` seconds, returning as soon as one or more have ended: those.

        An exception raised into this thread meanwhile (Ctrl-C, a task's timeout) is thrown into every work at its
        next step -- after its page, if one is in flight -- so that each hands its job back, and is raised here once
        every work has ended, or ``finish_grace`` later, when works whose pages still run are abandoned.
        """
        deadline = time.monotonic() + timeout
        ended: list[Ended] = []
        self._nudged = False
        try:
            while True:
                self._pump_once(deadline, ended)
                if ended or self._nudged or time.monotonic() >= deadline:
                    return ended
        except BaseException as interrupt:  # noqa: BLE001 - raised into this thread; re-raised below
            self._finish_after(interrupt)
            raise

    def _pump_once(self, deadline: float, ended: list[Ended], interrupt: BaseException | None = None) -> None:
        now = time.monotonic()
        wake = min(deadline, self._looked_at + WAKE_EVERY, self._timers[0][0] if self._timers else deadline)
        try:
            event = self._events.get(timeout=max(wake - now, 0.0))
        except queue.Empty:
            event = None
        if event is not None:
            self._heard(event, ended, interrupt)
        self._wake_due(interrupt)
        if time.monotonic() - self._looked_at >= WAKE_EVERY:
            self._look()

    def _heard(self, event: tuple[Any, ...], ended: list[Ended], interrupt: BaseException | None) -> None:
        kind, entry = event[0], event[1]
        if kind == "nudge":
            self._nudged = True
            return
        if kind == "wrote":
            self._wrote(event[1], event[2])
            return
        if entry not in self._running:
            return  # abandoned for good meanwhile
        if kind == "ended":
            self._running.discard(entry)
            ended.append((entry.tag, event[2], event[3]))
        elif kind == "yielded":
            self._yielded(entry, event[2], interrupt)
        elif kind == "paged" and entry.page is not None and event[2] == entry.generation:
            entry.page, entry.stop_page = None, None
            value, error = event[3], event[4]
            if interrupt is not None:
                value, error = None, interrupt
            self._step(entry, value, error)

    def _yielded(self, entry: Entry, step: PageCall | Wait | WriteEnd, interrupt: BaseException | None) -> None:
        if isinstance(step, WriteEnd):
            # Written even after an interrupt: it ends the job's attempt, as the interrupt's hand-back would.
            self._ends.append((entry, step))
            self._write_some()
        elif interrupt is not None:
            self._step(entry, None, interrupt)
        elif isinstance(step, Wait):
            if self._stop.is_set():
                self._step(entry, 0.0, None)
            else:
                now = time.monotonic()
                heapq.heappush(self._timers, (now + step.seconds, next(self._order), entry, now))
        else:
            self._page(entry, step)

    def _page(self, entry: Entry, call: PageCall) -> None:
        entry.generation += 1
        entry.page = InFlight(entry.work, call)
        generation = entry.generation

        def done(value: Any, error: BaseException | None) -> None:
            self._events.put(("paged", entry, generation, value, error))

        if call.asynchronous:
            future = start_page(call.handler(call.job))  # type: ignore[arg-type]

            def answered(future: Any) -> None:
                if future.cancelled():
                    return  # left behind
                error = future.exception()
                done(None if error is not None else future.result(), error)

            future.add_done_callback(answered)
            entry.stop_page = future.cancel
        else:
            run = self.pages.run(call, done)
            entry.stop_page = partial(self.pages.abandon, run)

    def _write_some(self) -> None:
        """Write the ends waiting, up to ``ENDS_AT_MOST`` of them in one batch, unless a batch is being written."""
        if self._writing or not self._ends:
            return
        batch, self._ends = self._ends[:ENDS_AT_MOST], self._ends[ENDS_AT_MOST:]
        self._writing = True
        # Ahead of the steps waiting: it ends many jobs at once, freeing their seats.
        self._steps.put((STARTING, next(self._order), partial(self._write, batch)))

    def _write(self, batch: list[tuple[Entry, WriteEnd]]) -> None:
        """On a step thread: write the batch's ends, and tell the pump each work's answer."""
        try:
            answers = self._write_ends([request for _, request in batch])
        except BaseException as exc:  # noqa: BLE001 - thrown into every work of the batch
            answers = [(None, exc)] * len(batch)
        self._events.put(("wrote", batch, answers))

    def _wrote(self, batch: list[tuple[Entry, WriteEnd]], answers: list[Answer]) -> None:
        """Send each work of a written batch what was written (an interrupt meanwhile waits for its next step: its
        end is written either way), then write the ends that came meanwhile."""
        self._writing = False
        for (entry, _), (value, error) in zip(batch, answers, strict=True):
            if entry in self._running:
                self._step(entry, value, error)
        self._write_some()

    def _wake_due(self, interrupt: BaseException | None) -> None:
        """Send the works whose waits are over (all of them once the slot stops) the seconds they slept."""
        now = time.monotonic()
        while self._timers and (self._timers[0][0] <= now or self._stop.is_set() or interrupt is not None):
            _, _, entry, began = heapq.heappop(self._timers)
            if entry in self._running:
                if interrupt is not None:
                    self._step(entry, None, interrupt)
                else:
                    self._step(entry, now - began, None)

    def _look(self) -> None:
        """Leave behind each page that must end; warn once of each that has run for half its timeout."""
        self._looked_at = time.monotonic()
        for entry in list(self._running):
            page = entry.page
            if page is None:
                continue
            why = page.why_end(self._graces)
            if why is not None:
                self._leave_behind(entry)
                self._step(entry, None, why)  # the work goes on at once without its page
            elif page.half_gone():
                page.warn(self._log)

    def _leave_behind(self, entry: Entry) -> None:
        entry.generation += 1
        if entry.stop_page is not None:
            entry.stop_page()
        entry.page, entry.stop_page = None, None
        self.left_behind += 1

    def _finish_after(self, interrupt: BaseException) -> None:
        """Throw ``interrupt`` into every work at its next step and wait up to ``finish_grace`` for them to end;
        abandon the works whose pages still run then (they unwind with WorkLeft, writing nothing more)."""
        deadline = time.monotonic() + self._graces.finish_grace
        ended: list[Ended] = []
        while self._running and time.monotonic() < deadline:
            try:
                self._pump_once(deadline, ended, interrupt)
            except BaseException:  # noqa: BLE001 - a second interrupt: stop waiting
                break
        for entry in list(self._running):
            self._running.discard(entry)
            if entry.page is not None:
                self._leave_behind(entry)
                try:
                    entry.work.throw(WorkLeft())
                except BaseException:  # noqa: BLE001 - the interrupt is what the caller hears of
                    pass

    def _step(self, entry: Entry, send: Any, throw: BaseException | None, *, first: bool = False) -> None:
        """Queue the work's next step for a step thread; ``first``: the work's first, which goes ahead of the others.

        A slot starts a work when a seat's job ends with its next job taken (that job's first step is a moment's work
        before its page) or when a seat takes. When hundreds of pages end together, their finishes queue for the few
        step threads; a first step queued behind them would make its job wait out that backlog twice: once for its
        finish, again for its start.
        """
        self._steps.put((STARTING if first else GOING_ON, next(self._order), (entry, send, throw)))

    def _serve_steps(self) -> None:
        while (task := self._steps.get()[2]) is not None:
            if callable(task):
                task()
                continue
            entry, send, throw = task
            try:
                step = entry.work.send(send) if throw is None else entry.work.throw(throw)
            except StopIteration as end:
                self._events.put(("ended", entry, end.value, None))
            except BaseException as exc:  # noqa: BLE001 - the work's own failure, reported with its end
                self._events.put(("ended", entry, None, exc))
            else:
                self._events.put(("yielded", entry, step))

    def close(self) -> None:
        """End the step threads and the idle page threads (a work still running is the caller's to end first)."""
        if self._started:
            self._started = False
            for _ in range(self._step_threads):
                self._steps.put((CLOSING, next(self._order), None))
        self.pages.close()


def _one_by_one(requests: list[WriteEnd]) -> list[Answer]:
    """Each end written alone, its failure thrown into its own work only."""
    answers: list[Answer] = []
    for request in requests:
        try:
            answers.append((request.write(), None))
        except BaseException as exc:  # noqa: BLE001 - thrown into its work
            answers.append((None, exc))
    return answers
