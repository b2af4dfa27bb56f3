"""A worker slot that runs up to ``jobs_per_slot`` jobs at once, each in a lane of its own, over a few connections.

Syncing for thousands of accounts means hundreds of pages in flight, each mostly waiting on its API. A
:class:`MultiSlot` keeps that many jobs running in one process: each in a :class:`~synclane_provider.core.run.seat.Seat`
of its own (its own worker name, so the lane rule, the fencing and every write are per job as in a one-job slot),
their statements through the slot's few :class:`~synclane_provider.core.db.connections.Connections`, their steps and
pages driven by one :class:`~synclane_provider.core.run.stepper.Stepper`.

How seats fill: one statement takes a job for each of up to ``TAKE_AT_MOST`` idle seats, in distinct free lanes
(``take_many``), and another follows while idle seats are left and the last one found some. A take that finds
nothing makes the slot *dry*: idle seats wait until a job ends in a lane that may have work due (work may have
come), a poll interval passes, or :meth:`MultiSlot.wake`.

How seats end their jobs: not one statement a job, as a one-job slot's finish and next take are, but the ends of
every page that returned meanwhile in one statement (``finish_many``, distinct owners a statement), after which
their seats are idle and take together. When hundreds of pages return at once, each job's end then costs a share
of two statements instead of a whole one: a round trip, a plan and a commit spread over the batch.
:meth:`MultiSlot.drain` returns once no job runs and the last take found nothing, so a worker task defers only with
nothing running and nothing due.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import cast

from synclane_provider.core.clock import Clock, database_clock
from synclane_provider.core.credentials import Sealer
from synclane_provider.core.db.connections import Connections
from synclane_provider.core.db.database import Database
from synclane_provider.core.db.listener import listener
from synclane_provider.core.db.store import Store, Taken
from synclane_provider.core.declare.declarations import SyncLane
from synclane_provider.core.metrics import NO_METRICS, Metrics
from synclane_provider.core.run.lane_gate import OwnerRates
from synclane_provider.core.run.lease import Leases
from synclane_provider.core.run.log_redaction import redact_logs
from synclane_provider.core.run.runner import DEFAULT_STOP_GRACE, RunResult, slot_graces
from synclane_provider.core.run.seat import Seat
from synclane_provider.core.run.slot import new_worker_id, worker_session
from synclane_provider.core.run.stepper import Answer, Stepper
from synclane_provider.core.run.summary import Summary
from synclane_provider.core.run.taking import TakingMany
from synclane_provider.core.run.tokens import TokenSource
from synclane_provider.core.run.work_thread import Work
from synclane_provider.core.run.write_end import WriteEnd

log = logging.getLogger("synclane_provider.core.run.worker")
"""The slots' log (and their jobs' lines), under the name logging configurations already give it."""

TAKE, RUN = "take", "run"

TAKE_AT_MOST = 50
"""The most idle seats one take asks a job for (one statement; more seats, more takes after it)."""


class MultiSlot:
    """One unit of concurrency of a queue running up to ``jobs_per_slot`` jobs at once (see the module's docstring)."""

    def __init__(
        self,
        synclane: SyncLane,
        database: Database,
        queue: str,
        *,
        jobs_per_slot: int,
        connections: int | None = None,
        worker_id: str | None = None,
        clock: Clock = database_clock,
        stop: threading.Event | None = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        give_up_after: timedelta = timedelta(minutes=5),
        stop_grace: timedelta = DEFAULT_STOP_GRACE,
        poll_interval: timedelta | None = None,
        metrics: Metrics = NO_METRICS,
        tokens: TokenSource | None = None,
        leases: Leases | None = None,
    ) -> None:
        """``leases``: the process's keeper (a pool's); a slot given none renews its jobs' leases itself, in one
        statement per interval through its connections."""
        self.queue = synclane.queue(queue)
        if jobs_per_slot < 1:
            raise ValueError(f"jobs_per_slot must be at least 1, got {jobs_per_slot!r}")
        self.jobs_per_slot = jobs_per_slot
        self.log = logger or log
        redact_logs(self.log)
        self._own_tokens = tokens is None
        self.tokens = tokens or TokenSource(database, Sealer(None), None, skew=self.queue.credentials_skew)
        self.worker_id = worker_id or new_worker_id(queue)
        self.clock = clock
        self.stop = stop or threading.Event()
        self.interrupted = threading.Event()
        self.poll_interval = (poll_interval or synclane.poll_interval).total_seconds()
        self.connections = Connections(
            database,
            size=connections or self.queue.connections,
            **worker_session(synclane, self.stop, lambda: False, give_up_after),
        )
        """The few connections every seat's statements go through."""
        self.store = Store(self.connections)
        self._own_leases = leases is None
        self.leases = leases or Leases(self.store, clock=clock)
        rates = OwnerRates(self.queue, refresh=synclane.plan_interval, log=self.log)
        self.seats = [
            Seat(
                synclane,
                self.queue,
                self.store,
                database,
                worker_id=f"{self.worker_id}.{i}",
                clock=clock,
                stop=self.stop,
                interrupted=self.interrupted,
                log=self.log,
                metrics=metrics,
                tokens=self.tokens,
                leases=self.leases,
                rates=rates,
                connections=self.connections,
            )
            for i in range(jobs_per_slot)
        ]
        self.stepper = Stepper(
            self.worker_id,
            self.log,
            graces=slot_graces(self.stop, self.interrupted, stop_grace),
            steps=self.connections.size,
            pages=jobs_per_slot,
            write_ends=self._write_ends,
        )
        self.takes = TakingMany(self.store, self.queue, clock=clock, metrics=metrics)
        """The takes for idle seats: up to ``TAKE_AT_MOST`` of them in one statement, in distinct lanes."""
        self._woken = threading.Event()
        """Set by :meth:`wake`, and by the process's listener when the table notifies the queue (see core.db.listener)."""
        self._listener = listener(database)
        self._listening = False

    @property
    def summary(self) -> Summary:
        """What this slot's runs came to: its seats' summaries together."""
        total = Summary()
        total.merge(self.takes.summary)
        for seat in self.seats:
            total.merge(seat.summary)
        return total

    @summary.setter
    def summary(self, summary: Summary) -> None:
        self.takes.summary = summary
        for seat in self.seats:
            seat.summary = Summary()

    def interrupt(self) -> None:
        """Stop because this process is about to be killed: every running job is handed back at once after its
        page, or at the cursor its page started from when the page still runs ``KILL_GRACE`` later."""
        self.interrupted.set()
        self.stop.set()
        self.wake()

    def wake(self) -> None:
        """Make idle seats take now rather than at the next poll (work may have come); any thread."""
        self._woken.set()
        self.stepper.nudge()

    def drain(self, *, max_jobs: int | None = None, until: float | None = None) -> Summary:
        """Run jobs, up to ``jobs_per_slot`` at once, until none runs and nothing is due in a free lane, the slot
        is stopped, about ``max_jobs`` started or ``until`` (monotonic) passed; the slot's summary."""
        if not self._listening:
            self._listener.register(self.queue.name, self.wake)
            self._listening = True
        idle = list(reversed(self.seats))
        started = 0
        taking = False
        dry = False
        dry_since = 0.0
        errors: list[BaseException] = []

        def stopping() -> bool:
            return (
                self.stop.is_set()
                or bool(errors)
                or (until is not None and time.monotonic() >= until)
                or (max_jobs is not None and started >= max_jobs)
            )

        while True:
            if self._woken.is_set() or (dry and time.monotonic() - dry_since >= self.poll_interval):
                self._woken.clear()
                dry = False
            if not stopping() and not dry and idle and not taking:
                asking = [idle.pop() for _ in range(min(len(idle), TAKE_AT_MOST))]
                self.stepper.start(self._taking(asking), (TAKE, asking))
                taking = True
            if self.stepper.running == 0 and (dry or stopping()):
                break
            for tag, value, error in self.stepper.pump(self.poll_interval):
                kind, seats = cast(tuple[str, list[Seat]], tag)
                if kind == TAKE:
                    taking = False
                if error is not None:
                    errors.append(error)
                    self.stop.set()
                    idle.extend(seats)
                    continue
                if kind == TAKE:
                    taken = {each.job.leased_by: each for each in cast(list[Taken], value)}
                    for seat in seats:
                        job = taken.get(seat.worker_id)
                        if job is None:
                            idle.append(seat)
                            continue
                        seat.taking.next, seat.held_over = job, False
                        started += 1
                        self.stepper.start(self._running(seat), (RUN, [seat]))
                    if not taken:
                        dry, dry_since = True, time.monotonic()
                    continue
                idle.extend(seats)  # its job's end written (a lane left with work due has woken the slot)
        if errors:
            raise errors[0]
        return self.summary

    def _taking(self, seats: list[Seat]) -> Work[list[Taken]]:
        """One take for ``seats`` (a job leased to each seat's worker name, in distinct lanes), as a work: a step
        with no page, run on a step thread."""
        return self.takes.take([seat.worker_id for seat in seats])
        yield  # a generator: the stepper runs it on a step thread

    def _running(self, seat: Seat) -> Work[RunResult | None]:
        """A seat's job (the one its take leased it), run to the end of its attempt, whose end the slot writes with
        the others' that come meanwhile (:meth:`_write_ends`); the seat then takes again with the idle ones."""
        return (yield from seat.running_one(then_continue=False))

    def _write_ends(self, requests: list[WriteEnd]) -> list[Answer]:
        """On a step thread: the ends of several seats' attempts, written in as few statements as their owners allow
        (one a statement each, as an owner's row is written once a statement); each one's answer, in their order.
        A lane left with work due wakes the slot's idle seats."""
        answers: dict[int, Answer] = {}
        for batch in _distinct_owners(requests):
            try:
                done = self.store.finish_many(
                    [(request.ends.worker, request.end.finish) for request in batch],
                    queue=self.queue.name,
                    now=self.clock(),
                    health_after=self.queue.owner_stretch.health_after,
                )
            except BaseException as exc:  # noqa: BLE001 - thrown into each work of the batch
                answers.update((id(request), (None, exc)) for request in batch)
                continue
            if done.lane_has_work:
                self._woken.set()
            answers.update((id(request), (written, None)) for request, written in zip(batch, done.written, strict=True))
        return [answers[id(request)] for request in requests]

    def close(self) -> None:
        """Hand back jobs taken for later, end the stepper's threads and close the connections."""
        try:
            for seat in self.seats:
                seat.close()
        finally:
            if self._listening:
                self._listener.unregister(self.queue.name, self.wake)
                self._listening = False
            self.stepper.close()
            if self._own_leases:
                self.leases.close()
            self.connections.close()
            if self._own_tokens:
                self.tokens.close()

    def __enter__(self) -> MultiSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _distinct_owners(requests: list[WriteEnd]) -> list[list[WriteEnd]]:
    """``requests`` in batches with no owner twice, each in the first batch that has none of its owner's."""
    batches: list[tuple[set[str], list[WriteEnd]]] = []
    for request in requests:
        owner = request.end.job.owner
        for owners, batch in batches:
            if owner not in owners:
                owners.add(owner)
                batch.append(request)
                break
        else:
            batches.append(({owner}, [request]))
    return [batch for _, batch in batches]
