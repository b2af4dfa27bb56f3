"""Running one leased job page by page (an :class:`~synclane_provider.core.run.attempt.Attempt`), and reading
how its end was written."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from synclane_provider.core.clock import Clock
from synclane_provider.core.db.page_transaction import PageTransaction
from synclane_provider.core.db.store import Finish, Store
from synclane_provider.core.declare.declarations import Queue
from synclane_provider.core.errors import UnknownJobTypeError
from synclane_provider.core.metrics import NO_METRICS, Metrics
from synclane_provider.core.records import Job
from synclane_provider.core.run.attempt import Attempt, AttemptSetting, Ended, EndOfAttempt
from synclane_provider.core.run.lane_gate import LaneGate
from synclane_provider.core.run.lease import LeaseKeeper
from synclane_provider.core.run.outcomes import describe_error, lost_attempt
from synclane_provider.core.run.results import Outcome, RunResult
from synclane_provider.core.run.taking import Taking
from synclane_provider.core.run.tokens import TokenSource
from synclane_provider.core.run.work_thread import Graces, Work
from synclane_provider.core.run.write_end import WriteEnd
from synclane_provider.core.states import JobStatus

__all__ = [
    "DEFAULT_STOP_GRACE",
    "INTERRUPT_GRACE",
    "KILL_GRACE",
    "EndOfAttempt",
    "JobRunner",
    "Outcome",
    "RunResult",
    "WriteEnd",
]

DEFAULT_STOP_GRACE = timedelta(seconds=30)
"""How long a stopping worker waits for a page in flight before it leaves the job to lapse to another worker."""
INTERRUPT_GRACE = timedelta(seconds=5)
"""How long an interrupted worker waits for the page in flight before it hands the job back (else it lapses)."""
KILL_GRACE = timedelta(seconds=2)
"""How long a worker whose process is about to be killed waits for the page in flight before it hands the job
back at the cursor that page started from (Airflow sends SIGKILL 5 s after SIGTERM; see WorkerSlot.interrupt)."""


def slot_graces(stop: threading.Event, interrupted: threading.Event, stop_grace: timedelta) -> Graces:
    """How a slot watches its pages in flight: left behind ``stop_grace`` after a stop, ``KILL_GRACE`` after an
    interrupt; an interrupt raised into the slot's thread waits ``INTERRUPT_GRACE`` for the works to end."""
    return Graces(
        stop=stop,
        stop_grace=stop_grace.total_seconds(),
        interrupted=interrupted,
        interrupt_grace=KILL_GRACE.total_seconds(),
        finish_grace=INTERRUPT_GRACE.total_seconds(),
    )


class JobRunner:
    """Runs jobs of one queue for one worker: handler page by page, cursor saved after each page.

    Every write is fenced on the worker's lease; when a write finds the lease
    gone, the runner stops at once and reports ``lease_lost``. The write that ends an attempt is the slot's
    (its :class:`~synclane_provider.core.run.taking.Taking`, ``ends``): the attempt returns an
    :class:`EndOfAttempt`, ``ends`` writes it, and the runner reads what was written (:meth:`written`).
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
        gate: LaneGate,
        ends: Taking,
        tokens: TokenSource,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        metrics: Metrics = NO_METRICS,
        interrupted: threading.Event | None = None,
        page_transaction: PageTransaction | None = None,
    ) -> None:
        self._lease = lease
        self._ends = ends
        self._setting = AttemptSetting(
            store,
            queue,
            worker,
            clock,
            stop,
            gate,
            metrics,
            log or logging.getLogger(__name__),
            tokens,
            interrupted,
            page_transaction,
        )

    def run(
        self, job: Job, *, lost_worker: str | None = None, throttle_left: float = 0.0, heard: bool = True
    ) -> Work[RunResult]:
        """Run ``job`` page by page to the end of this attempt: a work for the slot's
        :class:`~synclane_provider.core.run.work_thread.WorkThread`, which runs its pages.

        With ``lost_worker`` the job was taken over from a worker whose lease lapsed: that worker's attempt
        is written down as a failure (:class:`~synclane_provider.core.errors.WorkerLost`) and retried after
        its delay like any other, rather than continued at once -- a page that kills its worker every time
        must end abandoned, not be taken over forever.

        Before each page the job waits its turn in its lane's rate budget and out any throttle on its lane
        (``throttle_left``: what the take said was left of one); see :mod:`~synclane_provider.core.run.lane_gate`.
        A pause of its owner or a cancel that comes meanwhile stops the page before it is requested: the job is
        handed back. ``heard`` False: the job was taken a while ago (with the previous job's finish), so whether its
        first page may go is asked again even when nothing is waited for.
        """
        if lost_worker is not None:
            return self.after_lost_worker(job, lost_worker)
        try:
            job_type = self._setting.queue.job_type(job.type)
        except UnknownJobTypeError as exc:
            return self.ended(_ended(job, JobStatus.ABANDONED, job.processed_count, error=describe_error(exc)))
        with self._lease.watch(job.id) as lease:
            attempt = Attempt(self._setting, job, job_type, lease, throttle_left=throttle_left, heard=heard)
            return (yield from self.ending((yield from attempt.run())))

    def after_lost_worker(self, job: Job, lost_worker: str) -> RunResult:
        """Write down the attempt of a worker whose lease lapsed: abandoned when a cancel had asked it to stop,
        else a failure retried after its delay."""
        if job.stop_reason is not None:  # cancelled, then its worker was lost
            return self.ended(_ended(job, JobStatus.ABANDONED, job.processed_count, error=job.stop_reason))
        lost = lost_attempt(job.error, worker=lost_worker, cursor=job.cursor)
        failure = self._setting.queue.retry.after_failure(max(job.attempt_count, 1), lost)
        end = _ended(job, failure.status, job.processed_count, error=describe_error(lost), delay=failure.delay)
        return self.ended(end)

    def ended(self, end: Ended) -> RunResult:
        """An attempt's result: as it is when it is written already, else once its slot wrote its end, here."""
        if isinstance(end, RunResult):
            return end
        resent = self._setting.store.repeats
        return self.written(end, self._ends.write_end(end), resent)

    def ending(self, end: Ended) -> Work[RunResult]:
        """An attempt's result, its end written by whoever drives the work (:class:`WriteEnd`): a one-job slot writes
        it with its next take, a slot of many jobs with the ends of other jobs' pages that returned meanwhile. An
        end whose last page's rows landed in the jobs database is written here, in that page's transaction."""
        if isinstance(end, RunResult):
            return end
        if end.landing is not None:
            return self.ended(end)
        resent = self._setting.store.repeats
        written: Finish | None = yield WriteEnd(end, self._ends)
        return self.written(end, written, resent)

    def written(self, end: EndOfAttempt, written: Finish | None, resent: int) -> RunResult:
        """The result of an attempt whose end the slot wrote: what was written (a cancel turns any end but
        completion into abandoned); ``written`` None: the write found the lease lost, unless the row read back
        shows it was ours after all (the session ``resent`` it)."""
        status, error = end.finish.status, end.finish.error
        if written is not None:
            status, error = written.status, written.error
        else:
            read_back = self._setting.read_back(
                end.job,
                resent,
                cancellable=status is not JobStatus.COMPLETED,
                status=status,
                processed_count=end.finish.processed_count,
                error=error,
            )
            if read_back is None:
                return self._setting.lost(end.job, end.pages, end.records, end.waited)
            status, error = read_back.status, read_back.error
        landed = end.finish.landed or end.job.land_counts
        result = RunResult(end.job, Outcome(status.value), end.pages, end.records, error, end.waited, landed)
        self._setting.log.info("%s", result)
        return result


def _ended(
    job: Job, status: JobStatus, processed: int, *, error: str | None, delay: timedelta = timedelta(0)
) -> EndOfAttempt:
    """The end of an attempt that ran no page."""
    return EndOfAttempt(job, Finish(job.id, status, processed, error, delay), 0, 0, timedelta(0))
