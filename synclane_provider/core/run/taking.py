"""A slot's takes and the one write that ends each attempt: finish the last job and take the next, together.

A :class:`Taking` belongs to one :class:`~synclane_provider.core.run.slot.WorkerSlot`: it sends the slot's
``finish_and_take`` (or, when the last page's rows landed in the jobs database, the page transaction's finish),
holds the job taken with a finish until the slot runs it (:attr:`Taking.next`), and counts takes. The runner
hands it each attempt's :class:`~synclane_provider.core.run.attempt.EndOfAttempt` to write
(:meth:`Taking.write_end`); nothing it writes reaches back into the slot.

A :class:`TakingMany` is for a worker process that runs many jobs at once: it leases up to one job to each of
several worker ids in one statement (``take_many``), with the same rules, order and counts.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import psycopg.errors

from synclane_provider.core.clock import Clock
from synclane_provider.core.db.store import Finish, FinishAndTake, Store, Taken
from synclane_provider.core.declare.declarations import Queue
from synclane_provider.core.metrics import LEASE_TAKEOVERS, TAKE_WAIT, Metrics
from synclane_provider.core.run.attempt import EndOfAttempt
from synclane_provider.core.run.summary import Summary

LANE_INDEX = "jobs_one_running_per_lane_slot"
"""The unique index that keeps a lane at most its width: a take that loses a slot to another worker hits it."""
MAX_LANE_RACES = 50
"""Lane races lost in a row before a take gives up and reports nothing to do (the lanes are contended)."""


class Taking:
    """One slot's finishes and takes, and the job it took for later."""

    def __init__(
        self, store: Store, queue: Queue, *, worker: str, clock: Clock, stop: threading.Event, metrics: Metrics
    ) -> None:
        self.store = store
        self.queue = queue
        self.worker = worker
        self.clock = clock
        self.stop = stop
        self.metrics = metrics
        self.summary = Summary()
        """Where empty takes and lost lane races are counted (the slot's summary)."""
        self.next: Taken | None = None
        """The job taken as the last one finished, for the slot to run next."""
        self.hand_over = True
        """Whether a finish takes the next job with it (the slot will run it)."""
        self.found_nothing = False
        """Whether the take that came with the last finish found nothing to do."""

    def write_end(self, end: EndOfAttempt) -> Finish | None:
        """Write how an attempt ended: the one write that ends it, in the transaction its last page's rows landed
        in (which commits them with it; no take there, as a lost race for a lane slot would undo the page), else
        with the take of the slot's next job. What was written; None if the lease was lost."""
        if end.landing is None:
            return self.finish_and_take_next(end.finish)
        return end.landing.finish(
            end.finish,
            queue=self.queue.name,
            worker=self.worker,
            lease=self.queue.lease,
            now=self.clock(),
            health_after=self.queue.owner_stretch.health_after,
        )

    def finish_and_take_next(self, finish: Finish) -> Finish | None:
        """Write how a job ended and, unless the slot is stopping, take its next job in the same statement.

        Other workers never see the lane free between the two, so a lane whose
        next job is this worker's best choice passes straight to it instead of
        being raced for by every idle worker. (The take still follows queue
        order: when a job in another free lane comes first, that one is taken
        and this lane is free for others.)
        """
        take = self.hand_over and not self.stop.is_set()
        try:
            done = self.finish_and_take(finish, take=take)
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != LANE_INDEX:
                raise
            self.summary.lane_races += 1  # the finish was undone too: finish alone, take again later
            done = self.finish_and_take(finish, take=False)
        if take:
            self.next = done.taken
        self.found_nothing = take and done.taken is None
        return done.written

    def take(self) -> Taken | None:
        """Lease the next job, retrying lost lane races; None when nothing is due in a free lane."""
        for _ in range(MAX_LANE_RACES):
            try:
                return self.finish_and_take(None, take=True).taken
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name != LANE_INDEX:
                    raise
                self.summary.lane_races += 1  # another worker took this lane first; ask again
        return None

    def finish_and_take(self, finish: Finish | None, *, take: bool) -> FinishAndTake:
        """Finish the last job (if any) and lease the next (if ``take``), in one statement."""
        done = self.store.finish_and_take(
            queue=self.queue.name,
            worker=self.worker,
            lease=self.queue.lease,
            finish=finish,
            take=take,
            now=self.clock(),
            health_after=self.queue.owner_stretch.health_after,
        )
        if take and done.taken is None:
            self.summary.empty_takes += 1
        if done.taken is not None:
            self._count_take(done.taken)
        return done

    def _count_take(self, taken: Taken) -> None:
        count_take(self.metrics, self.queue.name, taken)


class TakingMany:
    """A worker process's takes of several jobs at once, one for each worker id it runs a job under.

    Each call sends ``take_many`` for the ids given (ids holding no job), and retries a race for a lane slot lost
    to another worker (the statement took nothing then) with half as many ids, down to one: a smaller take
    crosses fewer lanes that others are taking from. Counts empty takes and lost lane races in :attr:`summary`,
    and every take in ``metrics``, as :class:`Taking` does.
    """

    def __init__(self, store: Store, queue: Queue, *, clock: Clock, metrics: Metrics) -> None:
        self.store = store
        self.queue = queue
        self.clock = clock
        self.metrics = metrics
        self.summary = Summary()
        """Where empty takes and lost lane races are counted."""

    def take(self, workers: Sequence[str]) -> list[Taken]:
        """Lease up to one job to each of ``workers`` (distinct ids), in their order; fewer when fewer are due in
        free lanes, or when lost lane races left fewer ids to take for (none after ``MAX_LANE_RACES``)."""
        asking = list(workers)
        for _ in range(MAX_LANE_RACES):
            if not asking:
                return []
            try:
                taken = self.store.take_many(
                    queue=self.queue.name, workers=asking, lease=self.queue.lease, now=self.clock()
                )
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name != LANE_INDEX:
                    raise
                self.summary.lane_races += 1  # another worker took a slot this take wanted first; nothing was taken
                asking = asking[: max(len(asking) // 2, 1)]
                continue
            if not taken:
                self.summary.empty_takes += 1
            for each in taken:
                count_take(self.metrics, self.queue.name, each)
            return taken
        return []


def count_take(metrics: Metrics, queue: str, taken: Taken) -> None:
    """A take: a job taken over from a lost worker, or a waiting job and how long it waited once due."""
    job = taken.job
    tags = {"queue": queue, "type": job.type}
    if taken.lost_worker is not None:
        metrics.incr(LEASE_TAKEOVERS, tags)
    elif job.heartbeat_at is not None:
        # heartbeat_at is the take's own instant (the database's clock, like next_run_at).
        metrics.timing(TAKE_WAIT, tags, max((job.heartbeat_at - job.next_run_at).total_seconds(), 0.0))
