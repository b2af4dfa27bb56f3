"""The closed sets of job states and modes, and the transitions between states.

::

    [planned] --> pending --taken--> running --no next cursor--> completed
                     ^                 |  |  |
                     |   worker stops  |  |  +--attempt failed--> failed --delay over--> running
                     +-----------------+  |
                                          +--regular attempts used up--> deferred --lane idle--> running
                                          +--deferred attempt failed, or abandon--> abandoned
    failed, deferred, abandoned --requeue--> pending
    pending, failed, deferred --cancel--> abandoned

Every transition out of ``running`` is written by the worker holding the lease
and is fenced on it; the others are operations (requeue, cancel) or the take.
"""

from __future__ import annotations

from enum import Enum


class JobStatus(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    DEFERRED = "deferred"
    ABANDONED = "abandoned"

    def __str__(self) -> str:
        return self.value


class JobMode(str, Enum):
    INITIAL = "initial"  # a history slice, or a snapshot's first load
    RECURRING = "recurring"  # the periodic refresh
    MANUAL = "manual"  # enqueued by hand

    def __str__(self) -> str:
        return self.value


ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.PENDING: frozenset({JobStatus.RUNNING, JobStatus.ABANDONED}),
    JobStatus.FAILED: frozenset({JobStatus.RUNNING, JobStatus.PENDING, JobStatus.ABANDONED}),
    JobStatus.DEFERRED: frozenset({JobStatus.RUNNING, JobStatus.PENDING, JobStatus.ABANDONED}),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.COMPLETED,
            JobStatus.FAILED,
            JobStatus.DEFERRED,
            JobStatus.ABANDONED,
            JobStatus.PENDING,
            JobStatus.RUNNING,  # an expired lease taken over by another worker
        }
    ),
    JobStatus.ABANDONED: frozenset({JobStatus.PENDING}),
    JobStatus.COMPLETED: frozenset(),
}

WAITING = (JobStatus.PENDING, JobStatus.FAILED, JobStatus.DEFERRED)
"""States of a job that will run again without anyone's help."""

STOPPED = (JobStatus.FAILED, JobStatus.DEFERRED, JobStatus.ABANDONED)
"""States a requeue gives fresh attempts to."""
