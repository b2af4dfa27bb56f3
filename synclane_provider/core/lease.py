"""Keeping a job's lease alive while a slow page is in flight."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from synclane_provider.core.database import Session
from synclane_provider.core.errors import SyncLaneError

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews one job's lease in the background, a third of a lease after the last renewal.

    The worker stops trusting its lease *before* the database does: if no
    renewal has succeeded for 90 % of the lease (the database is away, or the
    renewal found the job taken over), ``lost`` turns true and the worker
    writes nothing more to the job. Every write is fenced in SQL as well; this
    is the worker's own early warning.
    """

    def __init__(
        self,
        session: Session,
        *,
        job_id: int,
        worker: str,
        lease: timedelta,
        clock: Callable[[], datetime | None],
    ) -> None:
        self._session = session
        self._job_id = job_id
        self._worker = worker
        self._lease = lease
        self._clock = clock
        self._interval = max(lease.total_seconds() / 3, 0.05)
        self._trusted_until = time.monotonic() + 0.9 * lease.total_seconds()
        self._taken_over = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"synclane-lease-{job_id}", daemon=True)

    @property
    def lost(self) -> bool:
        return self._taken_over or time.monotonic() > self._trusted_until

    def renewed(self) -> None:
        """Note a renewal made by the worker itself (every page save renews the lease)."""
        self._trusted_until = time.monotonic() + 0.9 * self._lease.total_seconds()

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            try:
                row = self._session.one(
                    "renew_lease", id=self._job_id, worker=self._worker, lease=self._lease, now=self._clock()
                )
            except SyncLaneError as exc:
                log.warning("could not renew the lease of job %s: %s", self._job_id, exc)
                continue
            if row is None:
                self._taken_over = True
                log.warning("lease of job %s was taken over; this worker stops writing to it", self._job_id)
                return
            self.renewed()

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
