"""Keeping the leases of a worker process's running jobs alive while slow pages are in flight.

One :class:`Leases` per process (a pool's, shared by its slots; a lone slot's own) renews every job's lease
from one thread, in one statement for all the jobs whose renewal is due, so that hundreds of jobs running at
once cost about one statement per renewal interval rather than one each. Each running job's watch
(:meth:`Leases.watch`) is a :class:`WatchedLease`, what its attempt reads (``lost``) and tells (``renewed()``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from synclane_provider.core.clock import Clock
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.store import Store

log = logging.getLogger(__name__)

RENEW_AFTER = 1 / 3
"""A lease is renewed this share of it after its last renewal, whoever made it (each page save renews too)."""

TRUST = 0.9
"""A worker stops trusting a lease no renewal of which succeeded for this share of it: before the database
does, so that it writes nothing more once another worker may have the job."""

SHORTEST_INTERVAL = 0.05
"""The shortest time between two renewals of a job, in seconds, however short its lease."""

TOGETHER = 0.25
"""A renewal due within this share of its interval after the earliest due one goes in the same statement: a
few jobs renewed a little early keep in step, so that N jobs cost about one statement per interval, not N."""


class WatchedLease:
    """One running job's lease as the process's :class:`Leases` keeps it, for as long as its ``with`` block.

    The worker stops trusting its lease *before* the database does: when no
    renewal has succeeded for 90 % of the lease (the database is away) or a
    renewal found the job taken over, :attr:`lost` turns true and the worker
    writes nothing more to the job. Every write is fenced in SQL as well; this
    is the worker's own early warning.
    """

    def __init__(self, leases: Leases, job_id: int, worker: str, lease: timedelta) -> None:
        self.job_id = job_id
        self.worker = worker
        self.lease = lease
        self.interval = max(lease.total_seconds() * RENEW_AFTER, SHORTEST_INTERVAL)
        self._trust = TRUST * lease.total_seconds()
        self._leases = leases
        self.renewed_at = time.monotonic()  # the job was just leased
        self.tried_at = 0.0
        """When the keeper last sent a renewal of it (a failed one is tried again an interval later)."""
        self.taken_over = False
        """A renewal found the job no longer its worker's: it is not renewed again, nor its loss logged again."""

    @property
    def lost(self) -> bool:
        return self.taken_over or time.monotonic() - self.renewed_at > self._trust

    def renewed(self) -> None:
        """Note a renewal made by the worker itself (every page save renews the lease)."""
        self.renewed_at = time.monotonic()

    @property
    def due_at(self) -> float:
        """When (monotonic) its next renewal is due: an interval after its last renewal, or after the last try
        when that failed."""
        return max(self.renewed_at, self.tried_at) + self.interval

    def __enter__(self) -> WatchedLease:
        return self

    def __exit__(self, *exc: object) -> None:
        """The job is no longer this worker's to keep: stop renewing it."""
        self._leases.unwatch(self)

    def __repr__(self) -> str:
        return f"WatchedLease(job {self.job_id} of {self.worker}, lease {self.lease})"


class Leases:
    """The lease keeper of a worker process: one thread that renews the leases of all the jobs it watches.

    It renews each lease a third of a lease after that lease's last renewal, whoever made it, and sleeps until
    the earliest is due, not for a fixed period, so a save just after one of its looks does not put its next
    renewal off by almost two thirds. The renewals due within a little of each other go in one statement
    (``renew_leases``). A renewal is also how the keeper learns that an operator took a job away, so the page in
    flight is left within a third of a lease of that. A statement that fails is logged and tried again an
    interval later, with the jobs then due; its result for a job whose watch ended meanwhile is ignored.

    The thread starts with the first watch and ends once nothing has been watched for a while, or on
    :meth:`close`; the next watch starts another. A keeper on a connection of its own
    (:meth:`on_own_connection`) closes that connection whenever its thread ends.
    """

    def __init__(self, store: Store, *, clock: Clock, owns_connection: bool = False) -> None:
        self._store = store
        self._clock = clock
        self._owns_connection = owns_connection
        self._changed = threading.Condition()
        """Guards what follows; notified when a watch starts or the keeper closes."""
        self._watched: dict[WatchedLease, None] = {}
        """The leases watched, in the order their watches started."""
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        """The current thread's stop."""
        self._idle_since = time.monotonic()
        self._wakes_at = 0.0
        """When the thread, waiting, wakes up by itself (0 while it is not waiting): a watch due sooner wakes it
        earlier; any other watch is left for it to find then, so a job's start costs the thread nothing."""
        self._linger = SHORTEST_INTERVAL
        """How long the thread waits for a watch with nothing watched before it ends: the longest renewal
        interval it kept, so that a slot's next job, taken as its last one finishes, finds it still there."""

    @classmethod
    def on_own_connection(cls, database: Database, *, clock: Clock, **session: Any) -> Leases:
        """A keeper with a session of its own (a pool's, shared by its slots), made with ``session`` (the options of
        :class:`~synclane_provider.core.db.database.Session`: its ``give_up_after`` bounds how long one renewal
        waits for the database before the next try, its ``stop`` lets a renewal in flight give up at once)."""
        return cls(Store(Session(database, prepare_threshold=0, **session)), clock=clock, owns_connection=True)

    def keeper(self, *, worker: str, lease: timedelta) -> LeaseKeeper:
        """What a worker slot watches its jobs' leases with: this keeper, with its worker id and its queue's lease."""
        return LeaseKeeper(self, worker, lease)

    def watch(self, job_id: int, *, worker: str, lease: timedelta) -> WatchedLease:
        """Keep ``job_id``'s lease (held by ``worker``, just leased) alive until the ``with`` block this is used in
        ends."""
        watched = WatchedLease(self, job_id, worker, lease)
        with self._changed:
            self._watched[watched] = None
            self._linger = max(self._linger, watched.interval)
            if self._thread is None:
                self._closed = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._closed,), name="synclane-leases", daemon=True
                )
                self._thread.start()
            elif watched.due_at < self._wakes_at:
                self._changed.notify()
        return watched

    def unwatch(self, watched: WatchedLease) -> None:
        """Stop renewing ``watched`` (its job ended, or is no longer its worker's); a renewal in flight for it
        is ignored."""
        with self._changed:
            if watched in self._watched:
                del self._watched[watched]
                if not self._watched:
                    self._idle_since = time.monotonic()

    @property
    def watched(self) -> int:
        """How many jobs' leases it keeps."""
        with self._changed:
            return len(self._watched)

    @property
    def renewing(self) -> bool:
        """Whether its thread is running."""
        with self._changed:
            return self._thread is not None

    def close(self) -> None:
        """Stop the renewing thread (and close its own connection); the next :meth:`watch` starts a new one."""
        with self._changed:
            thread, self._thread = self._thread, None
            self._closed.set()
            self._changed.notify_all()
        if thread is not None:
            thread.join()
        if self._owns_connection:
            self._store.session.close()

    def _run(self, closed: threading.Event) -> None:
        try:
            while (due := self._next_due(closed)) is not None:
                if due:
                    self._renew(due)
        finally:
            if self._owns_connection and not closed.is_set():
                self._store.session.close()  # nothing to keep: let others have the connection

    def _next_due(self, closed: threading.Event) -> list[WatchedLease] | None:
        """Wait until renewals are due and return them, each marked tried; None when the thread is to end."""
        with self._changed:
            while not closed.is_set():
                now = time.monotonic()
                kept = [watched for watched in self._watched if not watched.taken_over]
                if not self._watched and now - self._idle_since >= self._linger:
                    self._thread = None  # under the lock: a watch from now on starts another
                    return None
                if not kept:
                    self._wait(now + self._linger)
                    continue
                earliest = min(watched.due_at for watched in kept)
                if earliest > now:
                    self._wait(earliest)
                    continue
                due = [watched for watched in kept if watched.due_at <= now + TOGETHER * watched.interval]
                for watched in due:
                    watched.tried_at = now
                return due
            return None

    def _wait(self, until: float) -> None:
        """Wait (holding the lock's condition) until ``until`` (time.monotonic()), a sooner watch or the close."""
        self._wakes_at = until
        try:
            self._changed.wait(max(until - time.monotonic(), 0.0))
        finally:
            self._wakes_at = 0.0

    def _renew(self, due: list[WatchedLease]) -> None:
        try:
            renewed = self._store.renew_leases(
                ((watched.job_id, watched.worker, watched.lease) for watched in due), now=self._clock()
            )
        except Exception as exc:  # noqa: BLE001 - a failed renewal must not end the thread; the next one may work
            log.warning("could not renew the leases of %s running job(s): %s", len(due), exc)
            return
        lost = []
        with self._changed:
            for watched in due:
                if watched not in self._watched:
                    continue  # the job finished while the renewal was in flight
                if (watched.job_id, watched.worker) in renewed:
                    watched.renewed_at = time.monotonic()
                else:
                    watched.taken_over = True
                    lost.append(watched)
        for watched in lost:
            log.warning(
                "job %s: %s; this worker stops writing to it",
                watched.job_id,
                why_lost(self._store, watched.job_id, watched.worker),
            )


@dataclass(frozen=True)
class LeaseKeeper:
    """A worker slot's way to the process's :class:`Leases`: its jobs watched under its worker id and its queue's
    lease (``with slot.lease.watch(job.id) as lease:``)."""

    leases: Leases
    worker: str
    lease: timedelta

    def watch(self, job_id: int) -> WatchedLease:
        return self.leases.watch(job_id, worker=self.worker, lease=self.lease)


def why_lost(store: Store, job_id: int, worker: str) -> str:
    """Why a fenced write found the job no longer ``worker``'s, as the row tells it now (for the log)."""
    try:
        job = store.job(job_id)
    except Exception as exc:  # noqa: BLE001 - only a better log line was at stake
        return f"the lease is no longer this worker's (the row could not be read: {exc})"
    if job is None:
        return "the job was deleted"
    if job.leased_by is not None:
        return f"the job was taken over by worker {job.leased_by}"
    if job.error is not None and job.error.startswith(f"WorkerLost: worker {worker} "):
        return (
            f"the lease ran out (it lapsed, or was expired or shortened by hand) and another worker took the "
            f"job over, writing this attempt down as lost; the job is {job.status.value}"
        )
    return (
        f"the job is {job.status.value} and leased by no one: handed back by hand (or a take of ours was rolled back)"
    )
