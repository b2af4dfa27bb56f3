"""One attempt at one job, page by page: its own state, the context each page's handler gets, and how it ends.

An :class:`Attempt` holds where the attempt stands (the job as last saved, its pages, records, waits and the
page in flight's landed counts) and runs the steps of a page: wait its turn, call the handler with a
:class:`~synclane_provider.core.page_context.PageJob` whose context is the attempt's page, save the cursor. An
attempt that hands its job back (a stop, a pause) writes that itself; one that finishes it returns an
:class:`EndOfAttempt`, which the slot writes (with its next take, or in the last page's transaction) and the
runner reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import EllipsisType
from typing import Any

import psycopg

from synclane_provider.core.clock import Clock
from synclane_provider.core.credentials import TokenEndpointUnavailable
from synclane_provider.core.db.page_transaction import PageTransaction
from synclane_provider.core.db.store import Finish, Store
from synclane_provider.core.declare.declarations import JobType, Queue
from synclane_provider.core.errors import JobThrottled, OwnerPaused, PageTimeout
from synclane_provider.core.metrics import PAGE_DURATION, PAGES, RECORDS, THROTTLES, Metrics
from synclane_provider.core.page_context import PageJob
from synclane_provider.core.rate_headers import RateNews
from synclane_provider.core.records import Job, LandCounts, Page
from synclane_provider.core.redact import redact
from synclane_provider.core.run.lane_gate import LaneGate, PageNotSent, Turn
from synclane_provider.core.run.lease import WatchedLease, why_lost
from synclane_provider.core.run.outcomes import CANCELLED, describe_error
from synclane_provider.core.run.results import Outcome, RunResult
from synclane_provider.core.run.tokens import TokenSource
from synclane_provider.core.run.waits import Sleeps
from synclane_provider.core.run.work_thread import PageCall, PageLeftBehind, Work, WorkLeft, asynchronous
from synclane_provider.core.states import JobStatus


@dataclass(frozen=True)
class AttemptSetting:
    """What every attempt of one worker slot works with: its store, queue, name, clock, lane gate, transaction
    for pages landed in the jobs database, metrics, log and owners' credentials, and the slot's stop and interrupt
    flags."""

    store: Store
    queue: Queue
    worker: str
    clock: Clock
    stop: threading.Event
    gate: LaneGate
    metrics: Metrics
    log: logging.Logger | logging.LoggerAdapter[logging.Logger]
    tokens: TokenSource
    """Where a page's ``job.credentials()`` come from: the worker process's one TokenSource."""
    interrupted: threading.Event | None = None
    page_transaction: PageTransaction | None = None
    """Where pages land in the jobs database, committed with their cursor (see core.db.page_transaction)."""

    def read_back(
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
        if self.store.repeats == resent:
            return None
        now = self.store.job(job.id)
        if now is None or now.leased_by is not None or now.processed_count != processed_count:
            return None
        cancelled = now.status is JobStatus.ABANDONED and (now.error or "").startswith(CANCELLED)
        ours = now.status is status and (error is ... or now.error == error)
        return now if ours or (cancellable and cancelled) else None

    def lost(self, job: Job, pages: int, records: int, waited: timedelta) -> RunResult:
        """The job is no longer this worker's: nothing more is written."""
        result = RunResult(job, Outcome.LEASE_LOST, pages, records, waited=waited)
        self.log.warning("%s: %s; stopped without writing", result, why_lost(self.store, job.id, self.worker))
        return result


@dataclass(frozen=True)
class EndOfAttempt:
    """How an attempt ended, not yet written: the slot writes ``finish`` (in ``landing``, the last page's
    transaction its rows landed in, when there is one; else with its next take) and the runner reads what
    was written into a :class:`RunResult`."""

    job: Job
    finish: Finish
    pages: int
    records: int
    waited: timedelta
    landing: PageTransaction | None = None


class AttemptPage:
    """The context of one page of an attempt (a :class:`~synclane_provider.core.page_context.PageContext`): the
    units its handler spends are taken from the lane's budget and counted as the attempt's wait, its rows land
    in the slot's page transaction, what they did is counted for the page's cursor save, and its owner's
    credentials come from the worker's TokenSource."""

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt
        self._job = attempt.current
        self.counts: list[LandCounts] = []
        """What the page landed so far (each Destination.land it made); a page left behind adds to its own."""
        self.left = False
        """The slot stopped waiting for this page (see :meth:`leave`): whatever it lands from now on is refused, or
        it would join the transaction of the slot's next page and commit with another cursor."""
        self._lock = threading.Lock()

    def spend(self, units: int) -> timedelta:
        waited = self._attempt.setting.gate.spend(self._job, units)
        self._attempt.waited += waited.total_seconds()
        return waited

    def transaction(self) -> psycopg.Connection[Any] | None:
        landing = self._attempt.setting.page_transaction
        with self._lock:
            if self.left:
                raise PageLeftBehind("the worker stopped waiting for this page: its rows are not landed")
            return landing.connection() if landing is not None else None

    def leave(self, landing: PageTransaction | None) -> None:
        """The slot stops waiting for this page, still running: what it landed is abandoned, never committed, and
        it lands nothing more."""
        with self._lock:
            self.left = True
            if landing is not None and landing.open:
                landing.abandon()

    def count_landed(self, counts: LandCounts) -> None:
        self.counts.append(counts)

    def credentials(self) -> str:
        return self._attempt.setting.tokens.credential(self._job.queue, self._job.owner)

    def observe(self, news: RateNews) -> None:
        self._attempt.setting.gate.observe(self._job, news)

    def sent(self, at: float) -> None:
        self._attempt.setting.gate.sent(self._job, at)


NOT_THE_OWNERS_FAULT = (JobThrottled, TokenEndpointUnavailable)
"""Failures retried without counting against the owner's health: a throttle says "not now", and a token endpoint
that did not answer is the provider's passing trouble, not "this owner is broken"."""

Ended = RunResult | EndOfAttempt
"""What a step that ends the attempt returns: a result already written (a hand-back, a lost lease), or an end
for the slot to write."""


class Attempt:
    """One attempt at one job, page by page: where it stands (the job as last saved, the pages done, the records
    they brought, how long it waited) and the steps of one page. A step that ends the attempt returns it."""

    def __init__(
        self,
        setting: AttemptSetting,
        job: Job,
        job_type: JobType,
        lease: WatchedLease,
        *,
        throttle_left: float,
        heard: bool,
    ) -> None:
        self.setting = setting
        self.taken = job
        self.job_type = job_type
        self.lease = lease
        self.throttle_left = throttle_left
        self.heard = heard
        """Whether the table's last word on the job (its take, its last cursor save) came with no wait since."""
        self.current = job
        """The job as its last saved page left it (cursor, count, lease)."""
        self.processed = job.processed_count
        """The job's count, with the page that just landed (saved or not)."""
        self.pages = 0
        self.waited = 0.0
        """Seconds waited for the lane's rate budget or a throttle on the lane, before pages and in them."""
        self.tags = {"queue": setting.queue.name, "type": job.type}
        self.page_in_flight = AttemptPage(self)

    @property
    def records(self) -> int:
        """The records this attempt's pages brought."""
        return self.processed - self.taken.processed_count

    def run(self) -> Work[Ended]:
        while True:
            ended = yield from self.page()
            if ended is not None:
                return ended

    def page(self) -> Work[Ended | None]:
        """One page: wait its turn, call the handler, write what came back; None when the next page follows."""
        try:
            turn = yield from self.wait_turn()
        except PageNotSent as held:  # its owner was paused or a cancel came while it waited: not one more page
            self.waited += held.waited
            return self.release()
        if self.setting.stop.is_set():
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
        ended = self.page_done(page)
        if ended is None and turn.yields:  # the lane's recurring work waits for this history job's slot
            self.setting.log.info(
                "%s: hands lane %s over to its recurring work due, at cursor %r", self.current.describe(),
                self.current.lane, self.current.cursor,
            )  # fmt: skip
            return self.release()
        return ended

    def wait_turn(self) -> Sleeps[Turn]:
        """The page's turn in its lane's rate budget, and out of any throttle on the lane (none when stopping); raises
        PageNotSent when the page must not go any more."""
        if self.setting.stop.is_set():
            return Turn(())
        heard, self.heard = self.heard, True  # a page's cursor save is heard right before the next page
        turn = yield from self.setting.gate.before_page(self.current, throttle_left=self.throttle_left, heard=heard)
        self.waited += turn.waited
        return turn

    def call(self, turn: Turn) -> Work[Page]:
        """The handler's page, run by the work thread, checked."""
        self.page_in_flight = AttemptPage(self)  # a fresh page: one left behind that lands later adds to its own
        answer = yield PageCall(
            self.on_turn(self.job_type.handler, turn),
            PageJob.of(self.current, self.page_in_flight),
            timeout=self.job_type.page_timeout.total_seconds(),
            describe=self.current.describe,
            lease_lost=self.lease_lost,
            asynchronous=asynchronous(self.job_type.handler),
        )
        return Page.check(answer, job_type=self.taken.type, counted=self.current.processed_count)

    def on_turn(self, handler: Callable[[PageJob], object], turn: Turn) -> Callable[[PageJob], object]:
        """The handler, run once the page is sure to go on its turn (see LaneGate.keep_turn); a lane without a rate
        has no turn to keep. An ``async def`` handler's turn is kept on a thread of the loop's, not on the loop."""
        if not turn.kept:
            return handler
        if asynchronous(handler):

            async def async_page(job: PageJob) -> object:
                try:
                    self.waited += await asyncio.to_thread(self.setting.gate.keep_turn, job, turn)
                except PageNotSent as held:
                    self.waited += held.waited
                    raise
                return await handler(job)  # type: ignore[misc]

            return async_page

        def page(job: PageJob) -> object:
            try:
                self.waited += self.setting.gate.keep_turn(job, turn)
            except PageNotSent as held:
                self.waited += held.waited
                raise
            return handler(job)

        return page

    def lease_lost(self) -> bool:
        return self.lease.lost

    def undo_landing(self, *, left_behind: bool) -> None:
        """Roll back what the page landed in the jobs database; a page still running keeps its connection, which
        is never committed."""
        landing = self.setting.page_transaction
        if left_behind:
            self.page_in_flight.leave(landing)
        elif landing is not None and landing.open:
            landing.rollback()

    def timed(self, started: float) -> None:
        self.setting.metrics.timing(PAGE_DURATION, self.tags, time.monotonic() - started)

    def page_done(self, page: Page) -> Ended | None:
        """Save the page's cursor and count: the job completes on the last page, ends abandoned when a cancel
        came meanwhile, else goes on."""
        setting = self.setting
        setting.metrics.incr(PAGES, self.tags)
        setting.metrics.incr(RECORDS, self.tags, page.count)
        self.pages += 1
        self.processed = self.current.processed_count + page.count
        page_counts = self.page_in_flight.counts
        landed = sum(page_counts, self.current.land_counts)  # the job's, with this page's
        counts = landed if page_counts else None  # written to the row only when this page landed rows
        landing = setting.page_transaction
        if landing is not None and not landing.open:
            landing = None  # nothing landed in the jobs database: the cursor is saved on its own
        if self.lease.lost:
            self.undo_landing(left_behind=False)
            return self.lost()
        if page.next_cursor is None:
            return self.end(JobStatus.COMPLETED, landed=counts, landing=landing)
        save = setting.store.save_page if landing is None else landing.save_page
        try:
            saved = save(
                self.taken.id,
                worker=setting.worker,
                cursor=page.next_cursor,
                processed_count=self.processed,
                landed=counts,
                lease=setting.queue.lease,
                now=setting.clock(),
            )
        except Exception as exc:  # noqa: BLE001 - the page's transaction failed and rolled back: the page failed
            if landing is None:
                raise
            return self.failed(exc)
        if saved is None:
            return self.lost()
        self.lease.renewed()
        self.throttle_left = saved.throttle_left
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
            return self.end(JobStatus.ABANDONED, error=saved.stop_reason)
        if saved.owner_paused:  # paused while this page ran: not one more page for it
            return self.release()
        return None

    def failed(self, exc: Exception) -> Ended:
        """The page raised: a throttle holds the lane when it names a wait, OwnerPaused pauses the owner and hands
        the job back at its cursor; otherwise the retry policy says what next."""
        setting = self.setting
        if isinstance(exc, JobThrottled):
            setting.metrics.incr(THROTTLES, self.tags)
        if isinstance(exc, OwnerPaused):  # the pause is written even when the lease is lost
            return self.release(pausing=exc)
        if self.lease.lost:
            return self.lost()
        if isinstance(exc, JobThrottled):
            setting.gate.refused(self.current)  # a lane its answers' headers do not steer learns from the refusal
            if exc.retry_after and exc.retry_after > setting.queue.longest_wait:  # a quota's reset, far away
                setting.gate.hold_quota(self.current, exc.retry_after)
                return self.release()  # due at the reset, its cursor kept, the attempt not counted
        if isinstance(exc, JobThrottled) and exc.retry_after:  # a named wait (zero is none)
            setting.gate.throttle(self.current, exc.retry_after)  # before the finish: its take must see it
        failure = setting.queue.retry.after_failure(self.taken.attempt_count, exc)
        owner_failed = not isinstance(exc, NOT_THE_OWNERS_FAULT)
        return self.end(failure.status, error=describe_error(exc), delay=failure.delay, owner_failed=owner_failed)

    def left_behind(self, why: str) -> RunResult:
        """A stopping worker gave up waiting for the page in flight."""
        if self.lease.lost:
            return self.lost()
        if self.setting.interrupted is not None and self.setting.interrupted.is_set():
            # The process dies in moments, and the page with it: the lane must not wait a lease.
            return self.release()
        result = RunResult(self.current, Outcome.LEFT_RUNNING, self.pages, self.records, waited=self.waited_so_far())
        self.setting.log.warning(
            "%s: %s; left running at cursor %r, to be taken over once its lease lapses",
            result,
            why,
            self.current.cursor,
        )
        return result

    def end(
        self,
        status: JobStatus,
        *,
        error: str | None = None,
        delay: timedelta = timedelta(0),
        owner_failed: bool = False,
        landed: LandCounts | None = None,
        landing: PageTransaction | None = None,
    ) -> EndOfAttempt:
        """The attempt's end, for the slot to write (in ``landing`` when the last page's rows landed there)."""
        finish = Finish(self.current.id, status, self.processed, error, delay, owner_failed, landed)
        return EndOfAttempt(self.current, finish, self.pages, self.records, self.waited_so_far(), landing)

    def release(self, *, pausing: OwnerPaused | None = None) -> RunResult:
        """Hand the job back as pending at its cursor, the attempt not counted; with ``pausing``, its owner paused
        by its handler in the same statement."""
        setting, job = self.setting, self.current
        resent = setting.store.repeats
        if pausing is None:
            released = setting.store.release(
                job.id, worker=setting.worker, processed_count=job.processed_count, now=setting.clock()
            )
        else:
            released = setting.store.pause_owner_and_release(
                job,
                worker=setting.worker,
                processed_count=job.processed_count,
                reason=pausing.reason,
                error=describe_error(pausing.__cause__ or pausing),  # the 401 behind it, when the handler chained it
                now=setting.clock(),
                by=pausing.paused_by,  # 'credentials' for CredentialsNeedReconnecting
            )
        if released is None:
            released = setting.read_back(
                job, resent, cancellable=True, status=JobStatus.PENDING, processed_count=job.processed_count
            )
            if released is None:
                return self.lost()
        waited = self.waited_so_far()
        if released.status is JobStatus.ABANDONED:  # a cancel had asked it to stop
            result = RunResult(job, Outcome.ABANDONED, self.pages, self.records, released.error, waited)
            setting.log.info("%s", result)
            return result
        if pausing is not None:
            result = RunResult(job, Outcome.PAUSED, self.pages, self.records, redact(pausing.reason), waited)
            setting.log.warning(
                "%s: owner %s paused by %s (handed back at cursor %s)", result, job.owner, pausing.paused_by, job.cursor
            )
            return result
        setting.store.notify(setting.queue.name)  # the job is due again: wake an idle worker to take it over
        result = RunResult(job, Outcome.RELEASED, self.pages, self.records, waited=waited)
        setting.log.info("%s (handed back at cursor %s)", result, job.cursor)
        return result

    def lost(self) -> RunResult:
        return self.setting.lost(self.current, self.pages, self.records, self.waited_so_far())

    def waited_so_far(self) -> timedelta:
        return timedelta(seconds=self.waited)
