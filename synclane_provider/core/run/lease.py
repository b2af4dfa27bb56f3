"""Keeping the lease of a worker's current job alive while a slow page is in flight."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from synclane_provider.core.db.store import Store

log = logging.getLogger(__name__)


class LeaseKeeper:
    """One background thread per worker slot that renews the lease of the job the slot is running.

    It renews a third of a lease after the last renewal, whoever made it (each
    page save renews too, so fast jobs never need it): it sleeps until then,
    not for a fixed period, so a save just after one of its looks does not put
    its next renewal off by almost two thirds. A renewal is also how it learns
    that an operator took the job away, so the page in flight is left within
    a third of a lease of that. The worker stops trusting its lease
    *before* the database does: when no renewal has succeeded for 90 % of the
    lease (the database is away) or a renewal found the job taken over,
    ``lost`` turns true and the worker writes nothing more to the job. Every
    write is fenced in SQL as well; this is the worker's own early warning.
    """

    def __init__(
        self,
        store: Store,
        *,
        worker: str,
        lease: timedelta,
        clock: Callable[[], datetime | None],
    ) -> None:
        self._store = store
        self._worker = worker
        self._lease = lease
        self._clock = clock
        self._interval = max(lease.total_seconds() / 3, 0.05)
        self._trust = 0.9 * lease.total_seconds()
        self._lock = threading.Lock()
        self._job_id: int | None = None
        self._generation = 0
        self._renewed_at = 0.0
        self._tried_at = 0.0
        self._taken_over = False
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, job_id: int) -> "LeaseKeeper":
        """Keep ``job_id``'s lease alive until the ``with`` block this is used in ends (the job was just leased).

        The keeper is its own context manager rather than a generator's: a worker enters one per job.
        """
        with self._lock:
            self._job_id = job_id
            self._generation += 1
            self._renewed_at = time.monotonic()
            self._taken_over = False
        self._start()
        return self

    def __enter__(self) -> "LeaseKeeper":
        return self

    def __exit__(self, *exc: object) -> None:
        """The job is no longer this worker's to keep: stop renewing it."""
        with self._lock:
            self._job_id = None
            self._generation += 1

    @property
    def lost(self) -> bool:
        return self._taken_over or time.monotonic() - self._renewed_at > self._trust

    def renewed(self) -> None:
        """Note a renewal made by the worker itself (every page save renews the lease)."""
        self._renewed_at = time.monotonic()

    def close(self) -> None:
        """Stop the renewing thread; the next :meth:`watch` starts a new one."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._closed.set()
            thread.join()

    def _start(self) -> None:
        if self._thread is None:
            self._closed = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._closed,), name=f"synclane-lease-{self._worker}", daemon=True
            )
            self._thread.start()

    def _run(self, closed: threading.Event) -> None:
        while not closed.wait(self._until_due()):
            with self._lock:
                job_id, generation = self._job_id, self._generation
                due = time.monotonic() - max(self._renewed_at, self._tried_at) >= self._interval
            if job_id is not None and due and not self._taken_over:  # a lost lease is not renewed, nor logged again
                self._renew(job_id, generation)

    def _until_due(self) -> float:
        """Seconds until a renewal is due: an interval after the last one, or after the last try when that
        failed (a whole interval when there is nothing to renew)."""
        with self._lock:
            if self._job_id is None or self._taken_over:
                return self._interval
            return max(self._interval - (time.monotonic() - max(self._renewed_at, self._tried_at)), 0.0)

    def _renew(self, job_id: int, generation: int) -> None:
        self._tried_at = time.monotonic()
        try:
            renewed = self._store.renew_lease(job_id, worker=self._worker, lease=self._lease, now=self._clock())
        except Exception as exc:  # noqa: BLE001 - a failed renewal must not end the thread; the next one may work
            log.warning("could not renew the lease of job %s: %s", job_id, exc)
            return
        with self._lock:
            if generation != self._generation:
                return  # the job finished while the renewal was in flight
            if renewed is not None:
                self._renewed_at = time.monotonic()
                return
            self._taken_over = True
        log.warning("job %s: %s; this worker stops writing to it", job_id, why_lost(self._store, job_id, self._worker))


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
