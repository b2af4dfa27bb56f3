"""A pool of worker slots of one queue on threads, for use outside Airflow and in tests."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from synclane_provider.core.clock import Clock, database_clock
from synclane_provider.core.credentials import Sealer
from synclane_provider.core.db.database import Database
from synclane_provider.core.declare.declarations import SyncLane
from synclane_provider.core.errors import DatabaseUnavailableError
from synclane_provider.core.metrics import NO_METRICS, Metrics
from synclane_provider.core.records import Wakeup
from synclane_provider.core.run.lease import RENEW_AFTER, Leases
from synclane_provider.core.run.multislot import MultiSlot
from synclane_provider.core.run.runner import DEFAULT_STOP_GRACE
from synclane_provider.core.run.slot import WorkerSlot, new_worker_id, worker_settings
from synclane_provider.core.run.summary import Summary
from synclane_provider.core.run.tokens import OAuthClient, TokenSource
from synclane_provider.core.run.work_thread import Work

log = logging.getLogger("synclane_provider.core.run.worker")
"""The pool's log, under the name logging configurations already give it."""

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
        sealer: Sealer | None = None,
        oauth: OAuthClient | None = None,
        jobs_per_slot: int | None = None,
        connections: int | None = None,
    ) -> None:
        """``jobs_per_slot`` and ``connections``: the queue's unless given (see :class:`Queue`); a slot of more
        than one job is a :class:`~synclane_provider.core.run.multislot.MultiSlot`."""
        self.queue = synclane.queue(queue)
        self.tokens = TokenSource(database, sealer or Sealer(None), oauth, skew=self.queue.credentials_skew)
        """The owners' credentials of every slot's pages, refreshed once for all of them (``sealer`` opens them;
        ``oauth`` is the app's OAuth client, None for a queue whose owners have API keys)."""
        self.slots = slots if slots is not None else self.queue.concurrency
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")
        self.poll_interval = poll_interval or synclane.poll_interval
        self.clock = clock
        self.stop = threading.Event()
        self._finished = threading.Event()
        """Set when a slot saw the pool's work done: slots still trying to connect then give up."""
        self.leases = Leases.on_own_connection(
            database,
            clock=clock,
            settings=worker_settings(synchronous_commit=synclane.synchronous_commit),
            give_up_after=self.queue.lease * RENEW_AFTER,
            stop=self.stop,
            let_go=self._finished.is_set,
        )
        """Every slot's running jobs' leases, renewed together on a connection of its own."""
        self._idle = threading.Condition()
        self._wakes = 0
        """Wake-ups asked for so far: a slot that saw it change since its take does not wait (see :meth:`_work`)."""
        self.idle_waits = 0
        """Times a slot found nothing to take and waited: about none per job while every slot is busy."""
        self.jobs_per_slot = jobs_per_slot if jobs_per_slot is not None else self.queue.jobs_per_slot
        self._slots: list[WorkerSlot | MultiSlot] = [
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
                tokens=self.tokens,
                leases=self.leases,
            )
            if self.jobs_per_slot == 1
            else MultiSlot(
                synclane,
                database,
                queue,
                jobs_per_slot=self.jobs_per_slot,
                connections=connections,
                worker_id=new_worker_id(f"{queue}-{i}"),
                clock=clock,
                stop=self.stop,
                stop_grace=stop_grace,
                poll_interval=self.poll_interval,
                metrics=metrics,
                tokens=self.tokens,
                leases=self.leases,
            )
            for i in range(self.slots)
        ]

    def drain(self) -> Summary:
        """Run until the queue has nothing running and nothing due now; returns the combined summary.

        Jobs due later (a retry, a throttle, the next recurring window) stay waiting. The slots'
        connections are closed when it returns.
        """
        return self._on_threads(lambda slot: self._work(slot, done_when=lambda activity: activity.drained))

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
        return self._on_threads(lambda slot: self._work(slot, done_when=lambda activity: activity.settled))

    def run(self) -> Summary:
        """Keep running jobs until :meth:`shutdown` (running jobs are then handed back with their cursors).

        The slots' connections are closed when it returns.
        """
        return self._on_threads(lambda slot: self._work(slot, done_when=None))

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

    def _work(self, slot: WorkerSlot | MultiSlot, *, done_when: Callable[[Wakeup], bool] | None) -> None:
        try:
            if isinstance(slot, MultiSlot):
                self._serve(slot, done_when=done_when)
            else:
                slot.thread.run(self._working(slot, done_when=done_when))
        except DatabaseUnavailableError:
            if not self._finished.is_set():
                raise  # a slot that never got a connection while the others finished the work just ends
        finally:
            slot.close()  # on the slot's own thread: a pool of many slots stops as fast as one

    def _working(self, slot: WorkerSlot, *, done_when: Callable[[Wakeup], bool] | None) -> Work[None]:
        """A slot's life in the pool, all on its work thread: run jobs, and between them wait to be woken; the pool's
        run is over when ``done_when`` holds of what the queue looks like (never, when None)."""
        idle = False  # the last wait ended with nothing to do
        while not self.stop.is_set():
            woken = self._wakes  # a lane left after this instant ends the wait below before it starts
            result = yield from slot.running_one()
            if result is not None:
                idle = False
                following = slot.next_job
                if following is None or following.lane != result.job.lane:
                    self._wake()  # this slot left a lane that may still have work
                if following is not None or not slot.found_nothing:
                    continue
            look = slot.store.wakeup(self.queue.name, now=slot.clock())
            if done_when is not None and done_when(look):
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

    def _serve(self, slot: MultiSlot, *, done_when: Callable[[Wakeup], bool] | None) -> None:
        """A slot of many jobs' life in the pool: drain (it keeps its seats busy while work is due), and between two
        drains wait to be woken as a one-job slot does."""
        while not self.stop.is_set():
            woken = self._wakes
            slot.drain()
            look = slot.store.wakeup(self.queue.name, now=slot.clock())
            if done_when is not None and done_when(look):
                self._finished.set()
                self._wake(everyone=True)
                return
            with self._idle:
                if self.stop.is_set() or self._wakes != woken:
                    continue
                self.idle_waits += 1
                self._idle.wait(self._idle_seconds(look))

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
        needed = sum(slot.connections.size if isinstance(slot, MultiSlot) else 1 for slot in self._slots)
        if needed - 1 > room:
            log.warning(
                "pool of %s slot(s) for queue %s needs %s connection(s), but the server has room for %s more "
                "(max_connections, or the role's CONNECTION LIMIT): some slots will wait to connect",
                self.slots,
                self.queue.name,
                needed,
                room,
            )

    def _wake(self, *, everyone: bool = False) -> None:
        if everyone:
            for slot in self._slots:
                if isinstance(slot, MultiSlot):
                    slot.wake()
        with self._idle:
            self._wakes += 1
            if everyone:
                self._idle.notify_all()
            else:
                self._idle.notify()

    def _on_threads(self, work: Callable[[WorkerSlot | MultiSlot], None]) -> Summary:
        errors: list[BaseException] = []
        self._finished.clear()
        self._warn_if_the_server_has_too_little_room()

        def guarded(slot: WorkerSlot | MultiSlot) -> None:
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
        """Close every slot's connection, and the lease thread (done by :meth:`drain` and :meth:`run` as they return)."""
        for slot in self._slots:
            slot.close()
        self.leases.close()
        self.tokens.close()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.close()
