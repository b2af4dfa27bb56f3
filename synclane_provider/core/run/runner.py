"""Running one leased job page by page, and writing how it ended."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from types import EllipsisType
from typing import TypedDict, Unpack

from synclane_provider.core.clock import Clock
from synclane_provider.core.db.page_transaction import PageTransaction
from synclane_provider.core.db.store import Finish, Store
from synclane_provider.core.declare.declarations import JobType, Queue
from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import JobThrottled, OwnerPaused, PageTimeout, UnknownJobTypeError
from synclane_provider.core.metrics import NO_METRICS, PAGE_DURATION, PAGES, RECORDS, THROTTLES, Metrics
from synclane_provider.core.records import Job, LandCounts, Page
from synclane_provider.core.run.lane_gate import LaneGate, PageNotSent, Turn
from synclane_provider.core.run.lease import LeaseKeeper, why_lost
from synclane_provider.core.run.outcomes import CANCELLED, describe_error, lost_attempt
from synclane_provider.core.run.work_thread import PageCall, PageLeftBehind, Work, WorkLeft
from synclane_provider.core.states import JobStatus

DEFAULT_STOP_GRACE = timedelta(seconds=30)
"""How long a stopping worker waits for a page in flight before it leaves the job to lapse to another worker."""
INTERRUPT_GRACE = timedelta(seconds=5)
"""How long an interrupted worker waits for the page in flight before it hands the job back (else it lapses)."""
KILL_GRACE = timedelta(seconds=2)
"""How long a worker whose process is about to be killed waits for the page in flight before it hands the job
back at the cursor that page started from (Airflow sends SIGKILL 5 s after SIGTERM; see WorkerSlot.interrupt)."""

FinalWrite = Callable[[Finish], Finish | None]
"""Writes how a job ended; what was written (a cancel turns any end but completion into abandoned), None if the
lease was lost."""


class Ending(TypedDict, total=False):
    """How an attempt ends, besides its status: the error written, the delay before its next attempt, where the
    end is written (the last page's landing transaction; else the slot's own write), whether the failure counts
    against the owner's health, and what its pages landed."""

    error: str | None
    delay: timedelta
    write: FinalWrite | None
    owner_failed: bool
    landed: LandCounts | None


class Outcome(StrEnum):
    """How one run of a job ended, from the worker's point of view."""

    COMPLETED = "completed"
    FAILED = "failed"
    DEFERRED = "deferred"
    ABANDONED = "abandoned"
    RELEASED = "released"  # handed back as pending on a graceful stop
    PAUSED = "paused"  # its owner was paused (by its handler or a person): handed back as pending at its cursor
    LEASE_LOST = "lease_lost"  # the job is no longer this worker's (taken over, handed back); nothing more was written
    LEFT_RUNNING = "left_running"  # stopping, the worker gave up waiting for a page: the job's lease lapses


@dataclass(frozen=True)
class RunResult:
    job: Job
    outcome: Outcome
    pages: int
    records: int
    error: str | None = None
    waited: timedelta = timedelta(0)
    """How long the job waited before its pages for its lane's rate budget or a pause on its lane."""
    landed: LandCounts = LandCounts()
    """What the job's saved pages landed in their destination tables, all its attempts (its row's counts)."""

    def describe(self) -> str:
        text = f"{self.job.describe()}: {self.outcome} after {self.pages} page(s), {self.records} record(s)"
        if self.landed != LandCounts():
            text += f" (rows {self.landed.describe()})"
        if self.waited >= timedelta(milliseconds=1):
            text += f", waited {duration_text(timedelta(seconds=round(self.waited.total_seconds(), 2)))} for lane {self.job.lane}"
        return f"{text}; {self.error}" if self.error else text

    __str__ = describe  # so that loggers format it only when the line is written


class JobRunner:
    """Runs jobs of one queue for one worker: handler page by page, cursor saved after each page.

    Every write is fenced on the worker's lease; when a write finds the lease
    gone, the runner stops at once and reports ``lease_lost``.
    """

    def __init__(
        self,
        store: Store,
        queue: Queue,
        *,
        worker: str,
        clock: Clock,
        stop: threading.Event,
        lease: LeaseKeeper,
        final_write: FinalWrite,
        gate: LaneGate,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        metrics: Metrics = NO_METRICS,
        interrupted: threading.Event | None = None,
        page_transaction: PageTransaction | None = None,
    ) -> None:
        self._page_transaction = page_transaction
        """Where pages land in the jobs database, committed with their cursor (see core.db.page_transaction)."""
        self._metrics = metrics
        self._interrupted = interrupted
        self._lease = lease
        self._gate = gate
        self._waited = 0.0
        self._final_write = final_write
        self._store = store
        self._queue = queue
        self._worker = worker
        self._clock = clock
        self._stop = stop
        self._log = log or logging.getLogger(__name__)

    def run(
        self, job: Job, *, lost_worker: str | None = None, lane_wait: float = 0.0, heard: bool = True
    ) -> Work[RunResult]:
        """Run ``job`` page by page to the end of this attempt: a work for the slot's
        :class:`~synclane_provider.core.run.work_thread.WorkThread`, which runs its pages.

        With ``lost_worker`` the job was taken over from a worker whose lease lapsed: that worker's attempt
        is written down as a failure (:class:`~synclane_provider.core.errors.WorkerLost`) and retried after
        its delay like any other, rather than continued at once -- a page that kills its worker every time
        must end abandoned, not be taken over forever.

        Before each page the job waits its turn in its lane's rate budget and out any pause a throttle put on
        the lane (``lane_wait``: what the take said was left of one); see :mod:`~synclane_provider.core.run.lane_gate`.
        A pause of its owner or a cancel that comes meanwhile stops the page before it is requested: the job is
        handed back. ``heard`` False: the job was taken a while ago (with the previous job's finish), so whether its
        first page may go is asked again even when nothing is waited for.
        """
        self._waited = 0.0
        if lost_worker is not None:
            return self.after_lost_worker(job, lost_worker)
        try:
            job_type = self._queue.job_type(job.type)
        except UnknownJobTypeError as exc:
            return self._finish(job, JobStatus.ABANDONED, job.processed_count, 0, 0, error=describe_error(exc))
        with self._lease.watch(job.id) as lease:
            return (yield from _Attempt(self, job, job_type, lease, paused=lane_wait, heard=heard).run())

    def after_lost_worker(self, job: Job, lost_worker: str) -> RunResult:
        """Write down the attempt of a worker whose lease lapsed: abandoned when a cancel had asked it to stop,
        else a failure retried after its delay."""
        self._waited = 0.0
        if job.stop_reason is not None:  # cancelled, then its worker was lost
            return self._finish(job, JobStatus.ABANDONED, job.processed_count, 0, 0, error=job.stop_reason)
        lost = lost_attempt(job.error, worker=lost_worker, cursor=job.cursor)
        failure = self._queue.retry.after_failure(max(job.attempt_count, 1), lost)
        return self._finish(
            job, failure.status, job.processed_count, 0, 0, error=describe_error(lost), delay=failure.delay
        )

    def _finish(
        self, job: Job, status: JobStatus, processed: int, pages: int, records: int, **ending: Unpack[Ending]
    ) -> RunResult:
        resent = self._store.repeats
        error, landed = ending.get("error"), ending.get("landed")
        delay, owner_failed = ending.get("delay", timedelta(0)), ending.get("owner_failed", False)
        finish = Finish(job.id, status, processed, error, delay, owner_failed, landed)
        written = (ending.get("write") or self._final_write)(finish)
        if written is not None:
            status, error = written.status, written.error
        else:
            read_back = self._landed(
                job,
                resent,
                cancellable=status is not JobStatus.COMPLETED,
                status=status,
                processed_count=processed,
                error=error,
            )
            if read_back is None:
                return self._lost(job, pages, records)
            status, error = read_back.status, read_back.error
        result = RunResult(
            job, Outcome(status.value), pages, records, error, self._waited_so_far(), landed or job.land_counts
        )
        self._log.info("%s", result)
        return result

    def _on_turn(self, handler: Callable[[Job], object], turn: Turn) -> Callable[[Job], object]:
        """The handler, run on the work thread once the page is sure to go on its turn (see LaneGate.keep_turn);
        a lane without a rate has no turn to keep."""
        if turn.rate is None:
            return handler

        def page(job: Job) -> object:
            try:
                self._waited += self._gate.keep_turn(job, turn)
            except PageNotSent as held:
                self._waited += held.waited
                raise
            return handler(job)

        return page

    def _spender(self, job: Job) -> Callable[[int], timedelta]:
        """What the handler's ``job.spend(n)`` calls: takes the units from the lane's budget, counted as waited."""

        def spend(units: int) -> timedelta:
            waited = self._gate.spend(job, units)
            self._waited += waited.total_seconds()
            return waited

        return spend

    def _waited_so_far(self) -> timedelta:
        return timedelta(seconds=self._waited)

    def _release(self, job: Job, pages: int, records: int, *, pausing: OwnerPaused | None = None) -> RunResult:
        """Hand the job back as pending at its cursor, the attempt not counted; with ``pausing``, its owner paused
        by its handler in the same statement."""
        resent = self._store.repeats
        if pausing is None:
            released = self._store.release(
                job.id, worker=self._worker, processed_count=job.processed_count, now=self._clock()
            )
        else:
            released = self._store.pause_owner_and_release(
                job,
                worker=self._worker,
                processed_count=job.processed_count,
                reason=pausing.reason,
                error=describe_error(pausing.__cause__ or pausing),  # the 401 behind it, when the handler chained it
                now=self._clock(),
            )
        if released is None:
            released = self._landed(
                job, resent, cancellable=True, status=JobStatus.PENDING, processed_count=job.processed_count
            )
            if released is None:
                return self._lost(job, pages, records)
        if released.status is JobStatus.ABANDONED:  # a cancel had asked it to stop
            result = RunResult(job, Outcome.ABANDONED, pages, records, released.error, self._waited_so_far())
            self._log.info("%s", result)
            return result
        if pausing is not None:
            result = RunResult(job, Outcome.PAUSED, pages, records, pausing.reason, self._waited_so_far())
            self._log.warning(
                "%s: owner %s paused by its handler (handed back at cursor %s)", result, job.owner, job.cursor
            )
            return result
        self._store.notify(self._queue.name)  # the job is due again: wake an idle worker to take it over
        result = RunResult(job, Outcome.RELEASED, pages, records, waited=self._waited_so_far())
        self._log.info("%s (handed back at cursor %s)", result, job.cursor)
        return result

    def _landed(
        self,
        job: Job,
        resent: int,
        *,
        cancellable: bool,
        status: JobStatus,
        processed_count: int,
        error: str | None | EllipsisType = ...,
    ) -> Job | None:
        """The row as our last write left it, when that write found the job no longer ours but had in fact been
        made by us; else None.

        That happens when the connection broke after the statement ran but
        before its reply arrived: the session sent it again, and the repeat,
        fenced on the lease, found the job already moved on. Only then (the
        session resent something since ``resent``) is the row read back; it
        shows our write when it holds what we wrote (the error too, unless
        ``...``), or (``cancellable``) the abandonment our write became because
        a cancel had asked the job to stop.
        """
        if self._store.repeats == resent:
            return None
        now = self._store.job(job.id)
        if now is None or now.leased_by is not None or now.processed_count != processed_count:
            return None
        cancelled = now.status is JobStatus.ABANDONED and (now.error or "").startswith(CANCELLED)
        ours = now.status is status and (error is ... or now.error == error)
        return now if ours or (cancellable and cancelled) else None

    def _lost(self, job: Job, pages: int, records: int) -> RunResult:
        result = RunResult(job, Outcome.LEASE_LOST, pages, records, waited=self._waited_so_far())
        self._log.warning("%s: %s; stopped without writing", result, why_lost(self._store, job.id, self._worker))
        return result

    def _left_running(self, job: Job, pages: int, records: int, why: str) -> RunResult:
        result = RunResult(job, Outcome.LEFT_RUNNING, pages, records, waited=self._waited_so_far())
        self._log.warning(
            "%s: %s; left running at cursor %r, to be taken over once its lease lapses", result, why, job.cursor
        )
        return result


class _Attempt:
    """One attempt at one job, page by page: where it stands (the job as last saved, the pages done and the
    records they brought) and the steps of one page. A step that ends the attempt returns its RunResult."""

    def __init__(
        self, runner: JobRunner, job: Job, job_type: JobType, lease: LeaseKeeper, *, paused: float, heard: bool
    ) -> None:
        self.runner = runner
        self.taken = job
        self.job_type = job_type
        self.lease = lease
        self.paused = paused
        self.heard = heard
        """Whether the table's last word on the job (its take, its last cursor save) came with no wait since."""
        self.current = job
        """The job as its last saved page left it (cursor, count, lease)."""
        self.processed = job.processed_count
        """The job's count, with the page that just landed (saved or not)."""
        self.pages = 0
        self.tags = {"queue": runner._queue.name, "type": job.type}
        self.page_counts: list[LandCounts] = []
        """What the page in flight landed so far (each Destination.land it made)."""

    @property
    def records(self) -> int:
        """The records this attempt's pages brought."""
        return self.processed - self.taken.processed_count

    def run(self) -> Work[RunResult]:
        while True:
            ended = yield from self.page()
            if ended is not None:
                return ended

    def page(self) -> Work[RunResult | None]:
        """One page: wait its turn, call the handler, write what came back; None when the next page follows."""
        try:
            turn = self.wait_turn()
        except PageNotSent as held:  # its owner was paused or a cancel came while it waited: not one more page
            self.runner._waited += held.waited
            return self.release()
        if self.runner._stop.is_set():
            return self.release()
        if self.lease.lost:
            return self.lost()
        started = time.monotonic()
        try:
            page = yield from self.call(turn)
        except PageNotSent:
            return self.release()
        except PageLeftBehind as left:
            self.timed(started)
            self.undo_landing(left_behind=True)
            return self.left_behind(str(left))
        except Exception as exc:  # noqa: BLE001 - any handler failure (or a page timeout) is recorded on the row
            self.timed(started)
            self.undo_landing(left_behind=isinstance(exc, PageTimeout))
            return self.failed(exc)
        except WorkLeft:
            # Interrupted, and the page outlived the grace: it may still be sending requests, so nothing is
            # written; the job's lease lapses.
            self.undo_landing(left_behind=True)
            raise
        except BaseException:
            # An interrupt (Ctrl-C, SystemExit, a task timeout), raised by the handler or into the waiting
            # thread and thrown in here once the page was over: hand the job back with its cursor rather than
            # leave it running until its lease lapses.
            self.undo_landing(left_behind=False)
            self.release()
            raise
        self.timed(started)
        return self.landed(page)

    def wait_turn(self) -> Turn:
        """The page's turn in its lane's rate budget, and out of any pause on the lane (none when stopping); raises
        PageNotSent when the page must not go any more."""
        if self.runner._stop.is_set():
            return Turn(None)
        heard, self.heard = self.heard, True  # a page's cursor save is heard right before the next page
        turn = self.runner._gate.before_page(self.current, paused=self.paused, heard=heard)
        self.runner._waited += turn.waited
        return turn

    def call(self, turn: Turn) -> Work[Page]:
        """The handler's page, run by the work thread, checked."""
        runner = self.runner
        self.page_counts = []  # a fresh list: a page left behind that lands later adds to its own
        job = self.current.with_spend(runner._spender(self.current)).with_land_counter(self.page_counts.append)
        if runner._page_transaction is not None:
            job = job.with_page_transaction(runner._page_transaction)
        answer = yield PageCall(
            runner._on_turn(self.job_type.handler, turn),
            job,
            timeout=self.job_type.page_timeout.total_seconds(),
            describe=self.current.describe,
            lease_lost=self.lease_lost,
        )
        return Page.check(answer, job_type=self.taken.type, counted=self.current.processed_count)

    def lease_lost(self) -> bool:
        return self.lease.lost

    def undo_landing(self, *, left_behind: bool) -> None:
        """Roll back what the page landed in the jobs database; a page still running keeps its connection, which
        is never committed."""
        landing = self.runner._page_transaction
        if landing is not None and landing.open:
            landing.abandon() if left_behind else landing.rollback()

    def timed(self, started: float) -> None:
        self.runner._metrics.timing(PAGE_DURATION, self.tags, time.monotonic() - started)

    def landed(self, page: Page) -> RunResult | None:
        """Save the page's cursor and count: the job completes on the last page, ends abandoned when a cancel
        came meanwhile, else goes on."""
        runner = self.runner
        runner._metrics.incr(PAGES, self.tags)
        runner._metrics.incr(RECORDS, self.tags, page.count)
        self.pages += 1
        self.processed = self.current.processed_count + page.count
        landed = sum(self.page_counts, self.current.land_counts)  # the job's, with this page's
        counts = landed if self.page_counts else None  # written to the row only when this page landed rows
        landing = runner._page_transaction
        if landing is not None and not landing.open:
            landing = None  # nothing landed in the jobs database: the cursor is saved on its own
        if self.lease.lost:
            self.undo_landing(left_behind=False)
            return self.lost()
        if page.next_cursor is None:
            if landing is None:
                return self.finish(JobStatus.COMPLETED, landed=counts)
            return self.finish(JobStatus.COMPLETED, write=self.finish_with_landing(landing), landed=counts)
        save = runner._store.save_page if landing is None else landing.save_page
        try:
            saved = save(
                self.taken.id,
                worker=runner._worker,
                cursor=page.next_cursor,
                processed_count=self.processed,
                landed=counts,
                lease=runner._queue.lease,
                now=runner._clock(),
            )
        except Exception as exc:  # noqa: BLE001 - the page's transaction failed and rolled back: the page failed
            if landing is None:
                raise
            return self.failed(exc)
        if saved is None:
            return self.lost()
        self.lease.renewed()
        self.paused = saved.lane_wait
        self.current = dataclasses.replace(
            self.current,
            cursor=page.next_cursor,
            processed_count=self.processed,
            lease_expires_at=saved.lease_expires_at,
            inserted_count=landed.inserted,
            updated_count=landed.updated,
            unchanged_count=landed.unchanged,
            stale_count=landed.stale,
            deleted_count=landed.deleted,
        )
        if saved.stop_reason is not None:  # cancelled while this page ran
            return self.finish(JobStatus.ABANDONED, error=saved.stop_reason)
        if saved.owner_paused:  # paused while this page ran: not one more page for it
            return self.release()
        return None

    def failed(self, exc: Exception) -> RunResult:
        """The page raised: a throttle pauses the lane when it names a wait, OwnerPaused pauses the owner and hands
        the job back at its cursor; otherwise the retry policy says what next."""
        runner = self.runner
        if isinstance(exc, JobThrottled):
            runner._metrics.incr(THROTTLES, self.tags)
        if isinstance(exc, OwnerPaused):  # the pause is written even when the lease is lost
            return runner._release(self.current, self.pages, self.records, pausing=exc)
        if self.lease.lost:
            return self.lost()
        if isinstance(exc, JobThrottled) and exc.retry_after:  # a named wait (zero is none)
            runner._gate.pause(self.current, exc.retry_after)  # before the finish: its take must see it
        failure = runner._queue.retry.after_failure(self.taken.attempt_count, exc)
        owner_failed = not isinstance(exc, JobThrottled)  # a throttle says "not now", not "this owner is broken"
        return self.finish(failure.status, error=describe_error(exc), delay=failure.delay, owner_failed=owner_failed)

    def left_behind(self, why: str) -> RunResult:
        """A stopping worker gave up waiting for the page in flight."""
        if self.lease.lost:
            return self.lost()
        if self.runner._interrupted is not None and self.runner._interrupted.is_set():
            # The process dies in moments, and the page with it: the lane must not wait a lease.
            return self.release()
        return self.runner._left_running(self.current, self.pages, self.records, why)

    def finish_with_landing(self, landing: PageTransaction) -> FinalWrite:
        """The last page's end, written in the transaction its rows landed in."""
        runner = self.runner
        return lambda finish: landing.finish(
            finish,
            queue=runner._queue.name,
            worker=runner._worker,
            lease=runner._queue.lease,
            now=runner._clock(),
            health_after=runner._queue.owner_backoff.health_after,
        )

    def finish(self, status: JobStatus, **ending: Unpack[Ending]) -> RunResult:
        return self.runner._finish(self.current, status, self.processed, self.pages, self.records, **ending)

    def release(self) -> RunResult:
        return self.runner._release(self.current, self.pages, self.records)

    def lost(self) -> RunResult:
        return self.runner._lost(self.current, self.pages, self.records)
