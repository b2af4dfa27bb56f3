"""One seat of a worker slot: the place one running job takes, with its own worker name, lease and takes.

A slot that runs one job at a time has one seat; a slot that runs up to ``jobs_per_slot`` jobs at once has that
many, sharing the slot's connections, stop flag and owners' credentials. Everything a job's attempt writes is
fenced on its worker's name, so each seat has a name of its own (``leased_by``): two jobs running in one slot are
two workers to the table, each taking, saving and finishing only what it holds.
"""

from __future__ import annotations

import logging
import threading

from synclane_provider.core.clock import Clock
from synclane_provider.core.db.connections import Connections
from synclane_provider.core.db.database import Database
from synclane_provider.core.db.page_transaction import PageTransaction
from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.declarations import Queue, SyncLane
from synclane_provider.core.metrics import JOBS_FINISHED, Metrics
from synclane_provider.core.records import Job
from synclane_provider.core.run.lane_gate import LaneGate, OwnerRates
from synclane_provider.core.run.lease import Leases
from synclane_provider.core.run.runner import JobRunner, RunResult
from synclane_provider.core.run.summary import Summary
from synclane_provider.core.run.taking import Taking
from synclane_provider.core.run.tokens import TokenSource
from synclane_provider.core.run.work_thread import Work
from synclane_provider.core.states import JobStatus

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


class Seat:
    """Where one job of a slot runs: its worker name, lease keeper, lane gate, takes and page transaction."""

    def __init__(
        self,
        synclane: SyncLane,
        queue: Queue,
        store: Store,
        database: Database,
        *,
        worker_id: str,
        clock: Clock,
        stop: threading.Event,
        interrupted: threading.Event,
        log: Log,
        metrics: Metrics,
        tokens: TokenSource,
        leases: Leases,
        rates: OwnerRates,
        connections: Connections | None = None,
    ) -> None:
        """``connections``: the slot's shared ones (a slot of many jobs), which the seat's pages that land rows in the
        jobs database borrow one from for their transaction; None: they open one of their own."""
        self.queue = queue
        self.store = store
        self.worker_id = worker_id
        self.clock = clock
        self.metrics = metrics
        self.busy = False
        """A job of this seat is running (taken and not yet ended)."""
        self.landing = PageTransaction(database, connections)
        """The connection pages land on in the jobs database, opened by the first page that lands there."""
        self.lease = leases.keeper(worker=worker_id, lease=queue.lease)
        """Its jobs' leases, kept by the process's (or the slot's) :class:`Leases` under this seat's worker name."""
        self.gate = LaneGate(store, queue, clock=clock, stop=stop, rates=rates, log=log, metrics=metrics)
        self.taking = Taking(store, queue, worker=worker_id, clock=clock, stop=stop, metrics=metrics)
        """This seat's finishes and takes (``finish_and_take``; a slot of many jobs writes its seats' ends together
        and takes for them together instead), and the job it took for later."""
        self.runner = JobRunner(
            store,
            queue,
            worker=worker_id,
            clock=clock,
            stop=stop,
            lease=self.lease,
            gate=self.gate,
            ends=self.taking,
            tokens=tokens,
            log=log,
            metrics=metrics,
            interrupted=interrupted,
            page_transaction=self.landing,
        )
        self.held_over = False
        """The job taken for later was taken before the last run returned: the caller ran it later."""

    @property
    def summary(self) -> Summary:
        """What this seat's runs came to (kept by its :attr:`taking`, which counts the takes)."""
        return self.taking.summary

    @summary.setter
    def summary(self, summary: Summary) -> None:
        self.taking.summary = summary

    def count(self, result: RunResult) -> None:
        self.summary.add(result)
        tags = {"queue": self.queue.name, "type": result.job.type, "outcome": result.outcome.value}
        self.metrics.incr(JOBS_FINISHED, tags)

    def running_one(self, *, then_continue: bool = True) -> Work[RunResult | None]:
        """Run the next job (the one taken for later, else a new take) to the end of its attempt, as a work for
        the slot to drive; None when there was nothing to take. With ``then_continue`` the next job is taken as
        this one finishes (see :meth:`Taking.finish_and_take_next`); a caller that will not run it must
        :meth:`hand_back` it."""
        taken, self.taking.next = self.taking.next, None
        # Taken with the last job's finish, then handed to the caller's next run: a pause or a cancel may have
        # come since, which the first page must hear of before it is requested.
        heard, self.held_over = not (taken is not None and self.held_over), False
        self.taking.found_nothing = False
        if taken is None:
            taken = self.taking.take()
        if taken is None:
            return None
        self.taking.hand_over = then_continue
        self.busy = True
        try:
            result = yield from self.runner.run(
                taken.job, lost_worker=taken.lost_worker, throttle_left=taken.throttle_left, heard=heard
            )
        finally:
            self.busy = False
        self.count(result)  # a completed initial job has woken the first loads' watchers as it finished
        return result

    @property
    def next_job(self) -> Job | None:
        """The job taken as the last one finished, to run next (None if none was taken)."""
        return self.taking.next.job if self.taking.next is not None else None

    def hand_back(self) -> None:
        """Return a job taken for later, unstarted, as pending (its attempt does not count).

        A job that a cancel asked to stop meanwhile is not returned to be run: it ends abandoned, as the cancel
        promised. A job taken over from a lost worker is not handed back as it was: the lost attempt is written
        down first (see :meth:`JobRunner.run`), so that it counts.
        """
        taken, self.taking.next = self.taking.next, None
        if taken is not None and taken.lost_worker is not None:
            self.taking.hand_over = False
            self.count(self.runner.after_lost_worker(taken.job, taken.lost_worker))
        elif taken is not None:
            job = taken.job
            left = self.store.release(
                job.id, worker=self.worker_id, processed_count=job.processed_count, now=self.clock()
            )
            if left is not None and left.status is JobStatus.PENDING:
                self.store.notify(self.queue.name)  # due again: wake an idle worker to take it

    def close(self) -> None:
        """Hand back a job taken for later and close the page transaction's connection."""
        try:
            self.hand_back()
        finally:
            self.landing.close()
