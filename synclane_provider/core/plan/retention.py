"""Retention: deleting a queue's old finished jobs in small batches, without costing the planner its memory.

With recurring jobs every few minutes a queue gains millions of rows a month; the hot statements do not read
them (they use partial indexes over waiting work and the coverage table), but disks and backups do. So a
queue may declare ``retention``: completed recurring and manual jobs, and cancelled jobs, older than that
are deleted by the planning DAG after each plan, or on demand by :meth:`Operations.prune
<synclane_provider.core.ops.operations.Operations.prune>`.

What is never deleted, and why:

* **What the planner knows.** It reads coverage (oldest slice, newest window end) from the ``coverage`` table,
  which the planner's insert widens in the same statement; a job whose owner-type has no coverage row yet is
  not deleted. So a pruned window is never planned again.
* **Initial jobs.** A bounded number per owner (the history slices, the first snapshot): they are the record
  of the first load that progress and the initial-load sensor read.
* **Failed, deferred and abandoned jobs** (other than cancelled ones): they wait for a person.

Each batch is one short statement that skips rows locked by anyone (``FOR UPDATE SKIP LOCKED``) and takes
no lock a worker waits for: workers never touch finished jobs, and a batch holds its rows for
milliseconds. The number of batches per call is bounded too, so a first prune of a year of history is
spread over several planning runs instead of holding one up.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from synclane_provider.core.db.store import Store
from synclane_provider.core.durations import duration_text
from synclane_provider.core.numbers import whole

log = logging.getLogger(__name__)

BATCH = 1000
"""Jobs deleted per statement: a few milliseconds of locks and WAL at a time."""

MAX_BATCHES = 100
"""Batches per call: a planning run deletes at most this many batches, the rest waits for the next run."""


@dataclass(frozen=True)
class Pruned:
    """What one prune did: the jobs deleted, the batches it took, and whether it stopped with more to do."""

    queue: str
    deleted: int
    batches: int
    more: bool
    """True when it stopped at its batch or time bound with old jobs left (the next prune goes on)."""


def prune(
    store: Store,
    queue: str,
    *,
    older_than: timedelta,
    now: datetime | None = None,
    batch: int = BATCH,
    max_batches: int = MAX_BATCHES,
    time_budget: timedelta | None = None,
) -> Pruned:
    """Delete ``queue``'s finished jobs older than ``older_than``, ``batch`` at a time, each batch its own
    statement, until none is left, ``max_batches`` have run, or ``time_budget`` has passed."""
    if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
        raise ValueError(f"older_than must be a positive timedelta, got {older_than!r}")
    for name, value in (("batch", batch), ("max_batches", max_batches)):
        if not whole(value, 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    deadline = time.monotonic() + time_budget.total_seconds() if time_budget is not None else None
    deleted = batches = 0
    more = False
    while True:
        done, looked_at = store.prune(queue, older_than=older_than, now=now, batch=batch)
        deleted += done
        batches += 1
        full = looked_at >= batch and done > 0
        if not full:
            break
        if batches >= max_batches or (deadline is not None and time.monotonic() >= deadline):
            more = True
            break
    if deleted:
        log.info(
            "queue %s: %s finished job(s) older than %s pruned in %s batch(es)",
            queue,
            deleted,
            duration_text(older_than),
            batches,
        )
    return Pruned(queue, deleted, batches, more)
