"""Worker slots: take the next job whose lane is free, run it, repeat until nothing is due.

A :class:`WorkerSlot` is one unit of concurrency with its own connection; the
Airflow worker operator drives one slot per mapped task instance. A
:class:`WorkerPool` runs several slots on threads, for use outside Airflow
and in tests.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg.errors

from synclane_provider.core.clock import Clock, database_clock
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.store import Finish, FinishAndTake, Store, Taken
from synclane_provider.core.declare.declarations import SyncLane
from synclane_provider.core.errors import DatabaseUnavailableError
from synclane_provider.core.metrics import JOBS_FINISHED, LEASE_TAKEOVERS, NO_METRICS, TAKE_WAIT, Metrics
from synclane_provider.core.records import Job, Wakeup
from synclane_provider.core.run.landed import Landed
from synclane_provider.core.run.lane_gate import LaneGate
from synclane_provider.core.run.lease import LeaseKeeper
from synclane_provider.core.run.pages import PageThread
from synclane_provider.core.run.runner import DEFAULT_STOP_GRACE, JobRunner, Outcome, RunResult
from synclane_provider.core.states import JobStatus

log = logging.getLogger(__name__)

LANE_INDEX = "jobs_one_running_per_lane_slot"
"""The unique index that keeps a lane at most its width: a take that loses a slot to another worker hits it."""
MAX_LANE_RACES = 50
"""Lane races lost in a row before a take gives up and reports nothing to do (the lanes are contended)."""


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


WORKER_SETTINGS = worker_settings()
"""The settings of a worker session under the default declaration (benchmarks' baselines use them too)."""


def new_worker_id(label: str = "worker") -> str:
    """A name unique to one worker slot's life, readable in ``leased_by``: ``host:pid:label:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{label}:{uuid.uuid4().hex[:8]}"


@dataclass
class Summary:
    """What a worker did: jobs by outcome, pages and records. Adds up across slots and resumes.

    A job is counted completed once. It can complete twice when the database server crashed after its
    finish was acknowledged but before that commit reached the disk (see ``SyncLane.synchronous_commit``):
    the job was taken and run again. Such second completions are counted under ``repeated`` instead, with
    their pages and records, which were served again. (Across an operator's resumes only the counts are
    carried, so there a repeat is seen only within one stretch of work.)
    """

    outcomes: Counter[str] = field(default_factory=Counter)
    pages: int = 0
    records: int = 0
    empty_takes: int = 0
    lane_races: int = 0
    repeated: int = 0
    completed_jobs: set[int] = field(default_factory=set, repr=False)
    landed: Landed = field(default_factory=Landed)
    """The completed jobs by type and owner: what an asset event tells downstream work (see landed.py)."""

    def add(self, result: RunResult) -> None:
        self.pages += result.pages
        self.records += result.records
        if result.outcome is Outcome.COMPLETED:
            if result.job.id in self.completed_jobs:
                self.repeated += 1
                return
            self.completed_jobs.add(result.job.id)
            self.landed.add(result.job, result.records)
        self.outcomes[result.outcome.value] += 1

    def merge(self, other: "Summary") -> None:
        twice = self.completed_jobs & other.completed_jobs
        self.outcomes.update(other.outcomes)
        if twice:
            self.outcomes[Outcome.COMPLETED.value] -= len(twice)
        self.completed_jobs |= other.completed_jobs
        self.pages += other.pages
        self.records += other.records
        self.empty_takes += other.empty_takes
        self.lane_races += other.lane_races
        self.repeated += other.repeated + len(twice)
        self.landed.merge(other.landed)

    @property
    def jobs(self) -> int:
        return sum(self.outcomes.values())

    def as_dict(self) -> dict[str, int]:
        counts = {outcome.value: self.outcomes.get(outcome.value, 0) for outcome in Outcome}
        return {"jobs": self.jobs, **counts, "repeated": self.repeated, "pages": self.pages, "records": self.records}

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> "Summary":
        summary = cls(pages=data.get("pages", 0), records=data.get("records", 0), repeated=data.get("repeated", 0))
        summary.outcomes.update({o.value: data[o.value] for o in Outcome if data.get(o.value)})
        return summary


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
    ) -> None:
        self.queue = synclane.queue(queue)
        self.metrics = metrics
        self.worker_id = worker_id or new_worker_id(queue)
        self.clock = clock
        self.stop = stop or threading.Event()
        self.interrupted = threading.Event()
        """Set by :meth:`interrupt`: the process is about to be killed."""
        self._let_go = let_go
        self._busy = False
        self.session = Session(
            database,
            stop=self.stop,
            let_go=self._may_let_go,
            give_up_after=give_up_after,
            settings=worker_settings(synchronous_commit=synclane.synchronous_commit),
            prepare_threshold=0,
        )
        self.store = Store(self.session)
        self.lease = LeaseKeeper(self.store, worker=self.worker_id, lease=self.queue.lease, clock=clock)
        self.pages = PageThread(self.worker_id, logger or log)
        self.gate = LaneGate(
            self.store, self.queue, clock=clock, stop=self.stop, refresh=synclane.plan_interval, log=logger or log
        )
        self.runner = JobRunner(
            self.store,
            self.queue,
            worker=self.worker_id,
            clock=clock,
            stop=self.stop,
            lease=self.lease,
            pages=self.pages,
            final_write=self._finish_and_take_next,
            gate=self.gate,
            log=logger or log,
            stop_grace=stop_grace,
            metrics=metrics,
            interrupted=self.interrupted,
        )
        self.summary = Summary()
        self._next: Taken | None = None
        self._hand_over = True
        self.found_nothing = False
        """Whether the take that came with the last finish found nothing to do."""

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
        return not self._busy and self._let_go is not None and self._let_go()

    def _finish_and_take(self, finish: Finish | None, *, take: bool) -> FinishAndTake:
        """Finish the last job (if any) and lease the next (if ``take``), in one statement."""
        done = self.store.finish_and_take(
            queue=self.queue.name,
            worker=self.worker_id,
            lease=self.queue.lease,
            finish=finish,
            take=take,
            now=self.clock(),
        )
        if take and done.taken is None:
            self.summary.empty_takes += 1
        if done.taken is not None:
            self._count_take(done.taken)
        return done

    def _count_take(self, taken: Taken) -> None:
        """A take: a job taken over from a lost worker, or a waiting job and how long it waited once due."""
        job = taken.job
        tags = {"queue": self.queue.name, "type": job.type}
        if taken.lost_worker is not None:
            self.metrics.incr(LEASE_TAKEOVERS, tags)
        elif job.heartbeat_at is not None and job.leased_by == self.worker_id:
            # heartbeat_at is the take's own instant (the database's clock, like next_run_at).
            self.metrics.timing(TAKE_WAIT, tags, max((job.heartbeat_at - job.next_run_at).total_seconds(), 0.0))

    def _count(self, result: RunResult) -> None:
        self.summary.add(result)
        tags = {"queue": self.queue.name, "type": result.job.type, "outcome": result.outcome.value}
        self.metrics.incr(JOBS_FINISHED, tags)

    def _finish_and_take_next(self, finish: Finish) -> Finish | None:
        """Write how a job ended and, unless the slot is stopping, take its next job in the same statement.

        Other workers never see the lane free between the two, so a lane whose
        next job is this worker's best choice passes straight to it instead of
        being raced for by every idle worker. (The take still follows queue
        order: when a job in another free lane comes first, that one is taken
        and this lane is free for others.)
        """
        take = self._hand_over and not self.stop.is_set()
        try:
            done = self._finish_and_take(finish, take=take)
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != LANE_INDEX:
                raise
            self.summary.lane_races += 1  # the finish was undone too: finish alone, take again later
            done = self._finish_and_take(finish, take=False)
        if take:
            self._next = done.taken
        self.found_nothing = take and done.taken is None
        return done.written

    def take(self) -> Job | None:
        """Lease the next job this slot should run, without running it; None when nothing is due in a free lane.

        A low-level step (:meth:`run_one` takes and runs): the job stays leased to this slot until its lease
        lapses, and a job taken over from a lost worker is returned as it is, its lost attempt not written down.
        """
        taken = self._take()
        return taken.job if taken is not None else None

    def _take(self) -> Taken | None:
        for _ in range(MAX_LANE_RACES):
            try:
                return self._finish_and_take(None, take=True).taken
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name != LANE_INDEX:
                    raise
                self.summary.lane_races += 1  # another worker took this lane first; ask again
        return None

    def run_one(self, *, then_continue: bool = True) -> RunResult | None:
        """Run the next job to the end of this attempt; None when there was nothing to take.

        With ``then_continue`` the next job is taken as this one finishes (see
        :meth:`_finish_and_take_next`); a caller that will not run it must
        call :meth:`hand_back`.
        """
        taken, self._next = self._next, None
        self.found_nothing = False
        if taken is None:
            taken = self._take()
        if taken is None:
            return None
        self._hand_over = then_continue
        self._busy = True
        try:
            result = self.runner.run(taken.job, lost_worker=taken.lost_worker, lane_wait=taken.lane_wait)
        finally:
            self._busy = False
        self._count(result)  # a completed initial job has woken the first loads' watchers as it finished
        return result

    @property
    def next_job(self) -> Job | None:
        """The job taken as the last one finished, to run next (None if none was taken)."""
        return self._next.job if self._next is not None else None

    def hand_back(self) -> None:
        """Return a job taken for later, unstarted, as pending (its attempt does not count).

        A job that a cancel asked to stop meanwhile is not returned to be run: it ends abandoned, as the cancel
        promised.

        A job taken over from a lost worker is not handed back as it was: the lost attempt is written down
        first (see :meth:`JobRunner.run`), so that it counts.
        """
        taken, self._next = self._next, None
        if taken is not None and taken.lost_worker is not None:
            self._hand_over = False
            self._count(self.runner.run(taken.job, lost_worker=taken.lost_worker))
        elif taken is not None:
            job = taken.job
            left = self.store.release(
                job.id, worker=self.worker_id, processed_count=job.processed_count, now=self.clock()
            )
            if left is not None and left.status is JobStatus.PENDING:
                self.store.notify(self.queue.name)  # due again: wake an idle worker to take it

    def drain(self, *, max_jobs: int | None = None, until: float | None = None) -> Summary:
        """Run jobs until nothing is due, the slot is stopped, ``max_jobs`` ran or ``until`` (monotonic) passed."""
        done = 0
        try:
            while not self.stop.is_set():
                if until is not None and time.monotonic() >= until:
                    break
                last = max_jobs is not None and done + 1 >= max_jobs
                if self.run_one(then_continue=not last) is None:
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
            self.hand_back()
        finally:
            self.pages.close()
            self.lease.close()
            self.session.close()

    def __enter__(self) -> "WorkerSlot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MIN_IDLE_SECONDS = 0.01
"""The shortest sleep of an idle pool slot: a job due "now" by the clock may still be a moment from due."""


class WorkerPool:
    """Several worker slots of one queue on threads, for use outside Airflow and in tests.

    Three ways to run them, each returning the combined :class:`Summary` and closing the slots' connections:

    * :meth:`drain` -- until nothing is due *now*: jobs waiting out a retry or a throttle stay waiting;
    * :meth:`run_until_settled` -- until every job is settled (completed or abandoned), waiting through
      retries, throttles and lapsed leases: "sync everything";
    * :meth:`run` -- until :meth:`shutdown`.

    Idle slots sleep until another slot leaves a lane that may still have work, until the next waiting job
    is due (or a lease lapses), or at most one poll interval. They do not poll in a tight loop: with more
    slots than lanes, most slots have nothing to do, and a due job whose lane is full is not theirs to take.
    An idle slot keeps its connection while jobs are due (it will be busy again soon) and closes it when
    nothing is, so that an idle pool does not hold the server's connections.
    """

    def __init__(
        self,
        synclane: SyncLane,
        database: Database,
        queue: str,
        *,
        slots: int | None = None,
        clock: Clock = database_clock,
        poll_interval: timedelta | None = None,
        stop_grace: timedelta = DEFAULT_STOP_GRACE,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self.queue = synclane.queue(queue)
        self.slots = slots if slots is not None else self.queue.concurrency
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")
        self.poll_interval = poll_interval or synclane.poll_interval
        self.clock = clock
        self.stop = threading.Event()
        self._finished = threading.Event()
        """Set when a slot saw the pool's work done: slots still trying to connect then give up."""
        self._idle = threading.Condition()
        self._wakes = 0
        """Wake-ups asked for so far: a slot that saw it change since its take does not wait (see :meth:`_work`)."""
        self.idle_waits = 0
        """Times a slot found nothing to take and waited: about none per job while every slot is busy."""
        self._slots = [
            WorkerSlot(
                synclane,
                database,
                queue,
                worker_id=new_worker_id(f"{queue}-{i}"),
                clock=clock,
                stop=self.stop,
                stop_grace=stop_grace,
                let_go=self._finished.is_set,
                metrics=metrics,
            )
            for i in range(self.slots)
        ]

    def drain(self) -> Summary:
        """Run until the queue has nothing running and nothing due now; returns the combined summary.

        Jobs due later (a retry, a throttle, the next recurring window) stay waiting. The slots'
        connections are closed when it returns.
        """
        return self._on_threads(lambda slot: self._work(slot, ends=lambda activity: activity.drained))

    def run_until_settled(self) -> Summary:
        """Run until no job of the queue is running or waiting: each one completed or abandoned.

        Waits through retry and throttle delays, and for the leases of jobs whose workers were lost to
        lapse, as long as that takes (a queue with a slow retry policy takes as long as its delays add up
        to). It waits in real time, so it needs the database's clock: with a pinned clock, call
        :meth:`drain` and move the clock yourself. The slots' connections are closed when it returns.
        """
        if self.clock() is not None:
            raise ValueError(
                "run_until_settled() waits for time to pass; with a pinned clock use drain() and advance it"
            )
        return self._on_threads(lambda slot: self._work(slot, ends=lambda activity: activity.settled))

    def run(self) -> Summary:
        """Keep running jobs until :meth:`shutdown` (running jobs are then handed back with their cursors).

        The slots' connections are closed when it returns.
        """
        return self._on_threads(lambda slot: self._work(slot, ends=None))

    def shutdown(self) -> None:
        """Ask every slot to stop after its current page; safe to call from any thread.

        A slot whose page is still running ``stop_grace`` later (30 s by default) stops waiting for it: the
        job stays running until its lease lapses, and another worker then takes it over from its cursor. So
        :meth:`run` returns within about ``stop_grace`` even when a page hangs.
        """
        self.stop.set()
        self._wake(everyone=True)

    def wake(self) -> None:
        """Make every idle slot look at the table now rather than at its next poll; safe from any thread.

        For an application that makes jobs due in the same process (an
        enqueue, a requeue): its slots start on them at once, as deferred
        Airflow workers do when a NOTIFY reaches their triggers.
        """
        self._wake(everyone=True)

    def _work(self, slot: WorkerSlot, *, ends: Callable[[Wakeup], bool] | None) -> None:
        idle = False  # the last wait ended with nothing to do
        try:
            while not self.stop.is_set():
                woken = self._wakes  # a lane left after this instant ends the wait below before it starts
                result = slot.run_one()
                if result is not None:
                    idle = False
                    following = slot.next_job
                    if following is None or following.lane != result.job.lane:
                        self._wake()  # this slot left a lane that may still have work
                    if following is not None or not slot.found_nothing:
                        continue
                look = slot.store.wakeup(self.queue.name, now=slot.clock())
                if ends is not None and ends(look):
                    self._finished.set()
                    self._wake(everyone=True)
                    return
                if idle and not look.due:
                    slot.session.close()  # nothing due: let others have the connection while it waits
                with self._idle:
                    if self.stop.is_set() or self._wakes != woken:
                        idle = False
                        continue
                    self.idle_waits += 1
                    idle = not self._idle.wait(self._idle_seconds(look))
        except DatabaseUnavailableError:
            if not self._finished.is_set():
                raise  # a slot that never got a connection while the others finished the work just ends
        finally:
            slot.hand_back()
            slot.session.close()

    def _idle_seconds(self, look: Wakeup) -> float:
        """How long an idle slot sleeps: not at all when a take would find a job now (a lane race lost, a row
        locked a moment), else a poll interval, or less when a waiting job falls due or a lease lapses sooner.

        A due job whose lane is full does not count, as for the triggers (``worker_wakeup``): the lane's own
        slot takes it as its job ends, and a slot that leaves a lane wakes an idle one (:meth:`_wake`).
        """
        if look.takeable:
            return MIN_IDLE_SECONDS
        seconds = self.poll_interval.total_seconds()
        if look.wake_at is not None:
            seconds = min(seconds, (look.wake_at - look.now).total_seconds())
        return max(seconds, MIN_IDLE_SECONDS)

    def _warn_if_the_server_has_too_little_room(self) -> None:
        """More slots than the server (or the role) has connections left for: some slots wait to connect."""
        try:
            room = self._slots[0].store.connection_room()
        except DatabaseUnavailableError:
            return  # the slots will say so themselves
        if self.slots - 1 > room:
            log.warning(
                "pool of %s slot(s) for queue %s, but the server has room for %s more connection(s) "
                "(max_connections, or the role's CONNECTION LIMIT): some slots will wait to connect",
                self.slots,
                self.queue.name,
                room,
            )

    def _wake(self, *, everyone: bool = False) -> None:
        with self._idle:
            self._wakes += 1
            if everyone:
                self._idle.notify_all()
            else:
                self._idle.notify()

    def _on_threads(self, work: Callable[[WorkerSlot], None]) -> Summary:
        errors: list[BaseException] = []
        self._finished.clear()
        self._warn_if_the_server_has_too_little_room()

        def guarded(slot: WorkerSlot) -> None:
            try:
                work(slot)
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                errors.append(exc)
                self.shutdown()

        threads = [threading.Thread(target=guarded, args=(slot,), name=slot.worker_id) for slot in self._slots]
        try:
            for thread in threads:
                thread.start()
        finally:
            for thread in threads:
                if thread.ident is not None:
                    thread.join()
            self.close()
        if errors:
            raise errors[0]
        total = Summary()
        for slot in self._slots:
            total.merge(slot.summary)
            slot.summary = Summary()
        return total

    def close(self) -> None:
        """Close every slot's connection and lease thread (done by :meth:`drain` and :meth:`run` as they return)."""
        for slot in self._slots:
            slot.close()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.close()
