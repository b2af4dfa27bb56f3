"""A worker slot: take the next job whose lane is free, run it, repeat until nothing is due.

A :class:`WorkerSlot` is one unit of concurrency with its own connection; the Airflow worker operator drives
one slot per mapped task instance, and a :class:`~synclane_provider.core.run.pool.WorkerPool` runs several on
threads.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from synclane_provider.core.clock import Clock, database_clock
from synclane_provider.core.credentials import Sealer
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.declarations import SyncLane
from synclane_provider.core.metrics import NO_METRICS, Metrics
from synclane_provider.core.records import Job
from synclane_provider.core.run.lane_gate import OwnerRates
from synclane_provider.core.run.lease import Leases
from synclane_provider.core.run.log_redaction import redact_logs
from synclane_provider.core.run.runner import DEFAULT_STOP_GRACE, RunResult, slot_graces
from synclane_provider.core.run.seat import Seat
from synclane_provider.core.run.summary import Summary
from synclane_provider.core.run.tokens import TokenSource
from synclane_provider.core.run.work_thread import Work, WorkThread

log = logging.getLogger("synclane_provider.core.run.worker")
"""The slots' log (and their jobs' lines), under the name logging configurations already give it."""


def worker_settings(*, synchronous_commit: bool = False) -> dict[str, str]:
    """The settings of a worker slot's session.

    ``synchronous_commit`` comes from the declaration (see :attr:`SyncLane.synchronous_commit` for what
    turning it off costs; measured by the chaos soak, docs/soak.md: 122 server crashes in 30 minutes ran 101
    of 45,037 completed jobs again). A worker repeats the same few statements thousands of times, so each is planned
    once per connection: their plans do not depend on the values (every search starts from the queue's
    own indexes). JIT compilation is off, whatever the server estimates a statement's cost at on a large
    queue: compiling costs more than the millisecond a take runs.
    """
    return {
        "synchronous_commit": "on" if synchronous_commit else "off",
        "plan_cache_mode": "force_generic_plan",
        "jit": "off",
    }


def worker_session(
    synclane: SyncLane, stop: threading.Event, let_go: Callable[[], bool], give_up_after: timedelta
) -> dict[str, Any]:
    """The options of a worker's sessions (see :class:`Session`): its declaration's settings, each statement prepared
    from its first run, backing off through outages until ``give_up_after``, letting go when stopped or ``let_go``."""
    return {
        "stop": stop,
        "let_go": let_go,
        "give_up_after": give_up_after,
        "settings": worker_settings(synchronous_commit=synclane.synchronous_commit),
        "prepare_threshold": 0,
    }


WORKER_SETTINGS = worker_settings()
"""The settings of a worker session under the default declaration (benchmarks' baselines use them too)."""


def new_worker_id(label: str = "worker") -> str:
    """A name unique to one worker slot's life, readable in ``leased_by``: ``host:pid:label:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{label}:{uuid.uuid4().hex[:8]}"


class WorkerSlot:
    """One unit of concurrency of a queue: its own connection, one job at a time."""

    def __init__(
        self,
        synclane: SyncLane,
        database: Database,
        queue: str,
        *,
        worker_id: str | None = None,
        clock: Clock = database_clock,
        stop: threading.Event | None = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        give_up_after: timedelta = timedelta(minutes=5),
        stop_grace: timedelta = DEFAULT_STOP_GRACE,
        let_go: Callable[[], bool] | None = None,
        metrics: Metrics = NO_METRICS,
        tokens: TokenSource | None = None,
        leases: Leases | None = None,
    ) -> None:
        self.queue = synclane.queue(queue)
        redact_logs(logger or log)  # a handler logging its credential by mistake shows ***
        self._own_tokens = tokens is None
        self.tokens = tokens or TokenSource(database, Sealer(None), None, skew=self.queue.credentials_skew)
        """Where its pages' ``job.credentials()`` come from: the worker process's, shared by its slots (the pool's,
        the worker operator's); a slot given none has one of its own without a key, for queues that use none."""
        self.metrics = metrics
        self.worker_id = worker_id or new_worker_id(queue)
        self.clock = clock
        self.stop = stop or threading.Event()
        self.interrupted = threading.Event()
        """Set by :meth:`interrupt`: the process is about to be killed."""
        self._let_go = let_go
        self.session = Session(database, **worker_session(synclane, self.stop, self._may_let_go, give_up_after))
        self.store = Store(self.session)
        self._own_leases = leases is None
        self.leases = leases or Leases(self.store, clock=clock)
        """What renews its jobs' leases: the worker process's keeper, shared by its slots (the pool's); a slot given
        none has one of its own, which renews on the slot's connection."""
        self.seat = Seat(
            synclane,
            self.queue,
            self.store,
            database,
            worker_id=self.worker_id,
            clock=clock,
            stop=self.stop,
            interrupted=self.interrupted,
            log=logger or log,
            metrics=metrics,
            tokens=self.tokens,
            leases=self.leases,
            rates=OwnerRates(self.queue, refresh=synclane.plan_interval, log=logger or log),
        )
        """Where the slot's one job runs: its lease, lane gate, takes and page transaction."""
        self.landing = self.seat.landing
        self.lease = self.seat.lease
        self.gate = self.seat.gate
        self.taking = self.seat.taking
        self.runner = self.seat.runner
        self.thread = WorkThread(
            self.worker_id, logger or log, graces=slot_graces(self.stop, self.interrupted, stop_grace)
        )
        """Where this slot's jobs run, their pages watched from the thread that asked for them."""

    @property
    def summary(self) -> Summary:
        """What this slot's runs came to (kept by its seat's takes, which count them)."""
        return self.seat.summary

    @summary.setter
    def summary(self, summary: Summary) -> None:
        self.seat.summary = summary

    @property
    def found_nothing(self) -> bool:
        """Whether the take that came with the last finish found nothing to do."""
        return self.taking.found_nothing

    def interrupt(self) -> None:
        """Stop because this process is about to be killed (Airflow's SIGTERM, SIGKILL 5 s later); any thread.

        Like setting :attr:`stop`, but a page still running ``KILL_GRACE`` (2 s) later is not waited for: the
        job goes back to pending at the cursor that page started from, so its lane is free at once rather
        than when the lease lapses. The page's work is done again by the next worker.
        """
        self.interrupted.set()
        self.stop.set()

    def _may_let_go(self) -> bool:
        """Whether this slot may give up on an unreachable database early: only between jobs, when asked."""
        return not self.seat.busy and self._let_go is not None and self._let_go()

    def take(self) -> Job | None:
        """Lease the next job this slot should run, without running it; None when nothing is due in a free lane.

        A low-level step (:meth:`run_one` takes and runs): the job stays leased to this slot until its lease
        lapses, and a job taken over from a lost worker is returned as it is, its lost attempt not written down.
        """
        taken = self.taking.take()
        return taken.job if taken is not None else None

    def run_one(self, *, then_continue: bool = True) -> RunResult | None:
        """Run the next job to the end of this attempt; None when there was nothing to take.

        With ``then_continue`` the next job is taken as this one finishes (see
        :meth:`~synclane_provider.core.run.taking.Taking.finish_and_take_next`); a caller that will not run it must
        call :meth:`hand_back`.
        """
        try:
            return self.thread.run(self.running_one(then_continue=then_continue))
        finally:
            self.seat.held_over = self.taking.next is not None

    def running_one(self, *, then_continue: bool = True) -> Work[RunResult | None]:
        """:meth:`run_one` as a work for this slot's :attr:`thread`, to be part of a longer one (a pool's loop)."""
        return self.seat.running_one(then_continue=then_continue)

    @property
    def next_job(self) -> Job | None:
        """The job taken as the last one finished, to run next (None if none was taken)."""
        return self.seat.next_job

    def hand_back(self) -> None:
        """Return a job taken for later, unstarted, as pending (see :meth:`Seat.hand_back`)."""
        self.seat.hand_back()

    def drain(self, *, max_jobs: int | None = None, until: float | None = None) -> Summary:
        """Run jobs until nothing is due, the slot is stopped, ``max_jobs`` ran or ``until`` (monotonic) passed."""
        return self.thread.run(self._draining(max_jobs=max_jobs, until=until))

    def _draining(self, *, max_jobs: int | None, until: float | None) -> Work[Summary]:
        done = 0
        try:
            while not self.stop.is_set():
                if until is not None and time.monotonic() >= until:
                    break
                last = max_jobs is not None and done + 1 >= max_jobs
                if (yield from self.running_one(then_continue=not last)) is None:
                    break
                done += 1
                if last:
                    break
        finally:
            self.hand_back()
        return self.summary

    def close(self) -> None:
        """Hand back a job taken for later, stop renewing leases and close the connection.

        The slot can be used again afterwards: it reconnects on its next take.
        """
        try:
            self.seat.close()
        finally:
            self.thread.close()
            if self._own_leases:
                self.leases.close()
            self.session.close()
            if self._own_tokens:
                self.tokens.close()

    def __enter__(self) -> "WorkerSlot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
