"""Every exception SyncLane raises or understands, under one root.

Three of them are for handlers to raise: :class:`JobThrottled` ("slow down",
optionally with the wait the server named), :class:`JobAbandoned` ("a retry
cannot help" this job) and :class:`OwnerPaused` ("nothing can be done for this
owner until a person acts"). Anything else a handler raises is an ordinary
failure.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any


class SyncLaneError(Exception):
    """Root of SyncLane's own exceptions."""


class DeclarationError(SyncLaneError, ValueError):
    """A queue, job type or setting was declared with a value that cannot work."""


class UnknownQueueError(SyncLaneError, LookupError):
    """A queue name that no declaration has."""


class UnknownJobTypeError(SyncLaneError, LookupError):
    """A job type name that the queue does not declare."""


class HandlerResultError(SyncLaneError, TypeError):
    """A handler returned something other than a :class:`~synclane_provider.core.records.Page`."""


class LeaseLostError(SyncLaneError):
    """This worker's lease on a job was taken over; it must stop writing to the job."""


class LandingError(SyncLaneError, ValueError):
    """Records cannot be landed as declared: the table lacks what the declaration needs, or a page's rows do
    not fit it (a column the table lacks, a version left empty)."""


class DatabaseUnavailableError(SyncLaneError):
    """The database stayed unreachable for longer than the caller was willing to wait."""


class JobThrottled(SyncLaneError):
    """Raised by a handler when the other side asks to slow down.

    With ``retry_after`` the job waits exactly that long (e.g. from a
    ``Retry-After`` header); without it the queue's throttle delay applies.
    """

    MAX_RETRY_AFTER = timedelta(days=366)
    """The longest wait a server may name: anything longer is a misread header, not a plan."""

    def __init__(self, message: str = "throttled", *, retry_after: timedelta | float | None = None):
        super().__init__(message)
        if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool):
            retry_after = timedelta(seconds=retry_after)
        if retry_after is not None and not isinstance(retry_after, timedelta):
            raise TypeError(f"retry_after must be a timedelta or a number of seconds, got {retry_after!r}")
        if retry_after is not None and retry_after < timedelta(0):
            raise ValueError(f"retry_after must not be negative, got {retry_after}")
        if retry_after is not None and retry_after > self.MAX_RETRY_AFTER:
            raise ValueError(f"retry_after must be at most {self.MAX_RETRY_AFTER.days} days, got {retry_after}")
        self.retry_after: timedelta | None = retry_after


class WorkerLost(SyncLaneError):
    """The worker running a job stopped renewing its lease mid-job (killed, out of memory, cut off).

    Never raised: the worker that takes the job over writes it on the row as the lost attempt's error, and
    the job is retried, deferred and abandoned like any other failure. A page that kills its worker every
    time ends abandoned instead of being taken over forever.
    """


class PageTimeout(SyncLaneError):
    """A page did not return within its job type's ``page_timeout``: the attempt fails at its cursor, and the
    thread running the page is left behind (it cannot be stopped from outside)."""


class JobAbandoned(SyncLaneError):
    """Raised by a handler when a retry cannot help (access revoked, account gone)."""


class DeletionsRefused(LandingError, JobAbandoned):
    """A snapshot's last page would delete more of its owner's rows than its destination's ``deletion_share`` (or
    every one of them, having seen none): nothing of the page is written. A retry would fetch the page again only
    to be refused again -- whether the rows go is a person's decision -- so the job ends abandoned at once, at the
    cursor before that page, until a requeue with ``force_deletions`` lets it go ahead."""


class OwnerPaused(SyncLaneError):
    """Raised by a handler when nothing more can be done for the job's owner until a person acts (its token was
    revoked: a 401 or 403 that no retry will change).

    The owner is paused at once (``paused_by='handler'``, ``paused_reason`` this reason), the job handed back at
    its cursor without using an attempt, and no job of the owner is taken -- not one more page requested for it
    -- until it is resumed (``Operations.resume``). Its lane-mates run on.
    """

    paused_by = "handler"
    """``owners.paused_by`` of the pause it makes."""

    def __init__(self, reason: str) -> None:
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{type(self).__name__} needs a reason that says why, got {reason!r}")
        super().__init__(reason)
        self.reason = reason


class OwnerSourceError(SyncLaneError, TypeError):
    """An owner source returned something that is not an owner."""


class UnknownOwnerError(SyncLaneError, LookupError):
    """An owner that the queue's owner source does not list."""


class ConnectionTypeError(SyncLaneError, ValueError):
    """The connection named for the jobs table is not a PostgreSQL one (its type says another system)."""


class SchemaNotReadyError(SyncLaneError):
    """The jobs table's schema is missing, behind this release, or lacks an index, and SyncLane may not fix it
    (``create_schema`` is off). The message names what is missing and the command that applies it; ``status``
    holds what was read (a :class:`~synclane_provider.core.db.schema_versions.SchemaStatus`), when it was."""

    def __init__(self, message: str, status: Any = None) -> None:
        super().__init__(message)
        self.status = status


class MigrationPrivilegeError(SchemaNotReadyError, PermissionError):
    """A migration is pending and the connected role lacks a right it needs (or may not read the version).

    The message names the schema, the migration, the right, and how to apply it as another role.
    """
