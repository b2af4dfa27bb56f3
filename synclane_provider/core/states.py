"""The closed sets of job states and modes, and the transitions between states: the one list of them.

::

    planned or enqueued
         |
         v
      pending --taken--> running --no next cursor--> completed
         ^               |  |  |
         |  worker stops |  |  +--attempt failed--> failed --delay over, taken--> running
         +---------------+  +--regular attempts used up--> deferred --lane idle, taken--> running
                            +--deferred attempt failed, or abandon--> abandoned
    running --lease expired, another worker takes it over--> running
    failed, deferred, abandoned --requeue--> pending
    pending, failed, deferred --cancel--> abandoned
    running --released by an operator--> pending
    pending, running, failed, deferred --abandoned by an operator--> abandoned

Every transition out of ``running`` is written by the worker holding the lease and is fenced on it; the
others are the take (``finish_and_take``) or operations (requeue, cancel, release, abandon); an operator's
release or abandon of a running job takes it from its worker, whose next fenced write then finds it gone.

The SQL is checked against this module, not the other way round: ``tests/test_states.py`` compares the
table's CHECK constraints and partial indexes with these sets, every status literal and ``IN`` list in the
migrations and in ``queries.sql`` with them, and records the transitions each statement performs (a
trigger on a test schema) against ``ALLOWED_TRANSITIONS``, which must all be performed.

Adding a status (a mode likewise):

1. Add the member to :class:`JobStatus`, to the sets below it belongs to, its transitions to
   ``ALLOWED_TRANSITIONS``, and a line to the diagram.
2. Add a migration ``core/db/migrations/NNNN_<what>.sql`` that replaces the CHECK constraint
   ``jobs_status_is_known`` (and, for a waiting status, re-creates the partial indexes over ``WAITING``).
3. Run ``tests/test_states.py`` and ``tests/test_migrations.py``: they name each statement whose list no
   longer matches a set here, each index predicate, and each transition performed but not listed or listed
   but never performed (add a step to the test's scenario that performs it).
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    DEFERRED = "deferred"
    ABANDONED = "abandoned"


class OwnerHealth(StrEnum):
    """How an owner's attempts have been ending (``owners.health``): healthy, then degraded and failing as its
    consecutive failures grow, healthy again on its first clean completion. A pause is not a health: a paused
    owner keeps the health it had."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILING = "failing"


class OwnerCondition(StrEnum):
    """What a person reads about an owner: one answer, the worst that holds, in this order.

    ``paused`` (nothing of it runs until someone resumes it), ``failing`` and ``degraded`` (its health; an owner
    with an abandoned job, which waits for a person, is degraded at least), ``behind`` (its data lags more than
    the queue's ``max_lag``), ``healthy``. The page, the CLI, the planning log line and the owner gauges all say
    this, so that their counts add up to the owners listed. A job waiting to retry is none of these: retries
    are routine until its attempts are spent (deferred) or the owner turns degraded.
    """

    PAUSED = "paused"
    FAILING = "failing"
    DEGRADED = "degraded"
    BEHIND = "behind"
    HEALTHY = "healthy"


def owner_condition(*, paused: bool, health: str, abandoned: bool, behind: bool) -> OwnerCondition:
    """The owner's condition from what the table says of it: the first that holds of paused, failing, degraded
    (by health, or an abandoned job), behind.

    >>> owner_condition(paused=True, health="failing", abandoned=True, behind=True).value
    'paused'
    >>> owner_condition(paused=False, health="healthy", abandoned=True, behind=True).value
    'degraded'
    >>> owner_condition(paused=False, health="healthy", abandoned=False, behind=False).value
    'healthy'
    """
    if paused:
        return OwnerCondition.PAUSED
    if health == OwnerHealth.FAILING:
        return OwnerCondition.FAILING
    if health == OwnerHealth.DEGRADED or abandoned:
        return OwnerCondition.DEGRADED
    if behind:
        return OwnerCondition.BEHIND
    return OwnerCondition.HEALTHY


class JobMode(StrEnum):
    INITIAL = "initial"  # a history slice, or a snapshot's first load
    RECURRING = "recurring"  # the periodic refresh
    MANUAL = "manual"  # enqueued by hand


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
"""Every change of a job's status (or of the worker holding it) that a statement may make."""

WAITING = (JobStatus.PENDING, JobStatus.FAILED, JobStatus.DEFERRED)
"""States of a job that will run again without anyone's help: what the take, the wake-ups and the partial
indexes look at, and what cancel abandons."""

WAITING_IN_TURN = (JobStatus.PENDING, JobStatus.FAILED)
"""Waiting states that run in queue order. A deferred job, the rest of ``WAITING``, runs only when its lane
has none of these due."""

STOPPED = (JobStatus.FAILED, JobStatus.DEFERRED, JobStatus.ABANDONED)
"""States a requeue gives fresh attempts to."""

ATTEMPTS_SPENT = (JobStatus.DEFERRED, JobStatus.ABANDONED)
"""The part of ``STOPPED`` whose attempts are spent: a failure to show. A failed job waiting to retry is
routine until it gets here."""

NOT_WAITING = tuple(status for status in JobStatus if status not in WAITING)
"""Every state but ``WAITING``'s: how a statement names waiting jobs when no partial index of waiting jobs may
serve it (``status NOT IN`` these; see ``move_lanes``, which finds an owner's jobs by owner instead)."""

UNSETTLED = (*WAITING, JobStatus.RUNNING)
"""States of a job that is running or will run again: what an operator's abandon gives up on."""
