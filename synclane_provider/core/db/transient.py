"""Which database errors pass, and how long to wait before trying again: one policy for every connection.

Worker sessions (sync) and the triggers' watches (async) both use it, so a deadlock, a statement timeout or
a server restart is survived the same way wherever it happens. Every statement the engine sends is safe to
repeat (see :mod:`~synclane_provider.core.db.database`), so an error that passes is simply waited out.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import psycopg

CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
"""What the driver raises when a connection cannot be opened or breaks (and for some statement errors too:
:func:`passes` tells them apart once a statement failed)."""

PASSING_ERROR_CLASSES = frozenset({"08", "40", "53", "57", "58"})
"""SQLSTATE classes worth another try: connection exception, transaction rollback (deadlock, serialization),
insufficient resources, operator intervention (statement timeout, cancel, shutdown), system error."""
PASSING_ERRORS = frozenset({"55P03"})
"""Single SQLSTATEs worth another try: lock_not_available (``lock_timeout``)."""


def passes(error: BaseException, *, connection_closed: bool) -> bool:
    """Whether a statement that failed with ``error`` may succeed if sent again.

    Yes when its connection broke (whatever the error says), or when the server turned it down for a passing
    reason; no for what the statement is (a constraint, a privilege, a value too large for an index):
    repeating those would only hide the error for minutes.

    >>> passes(psycopg.errors.DeadlockDetected(), connection_closed=False)
    True
    >>> passes(psycopg.errors.UniqueViolation(), connection_closed=False)
    False
    """
    if not isinstance(error, psycopg.Error):
        return False
    if connection_closed:
        return True
    sqlstate = error.sqlstate or ""
    return sqlstate[:2] in PASSING_ERROR_CLASSES or sqlstate in PASSING_ERRORS


def passes_from_anywhere(error: BaseException) -> bool:
    """Whether a database error raised by code that is not ours (an owner source reading its accounts) passes.

    Its connection cannot be looked at, so a connection error with no SQLSTATE (refused, reset, timed out)
    counts as a broken connection; anything else is judged by its SQLSTATE, as our own statements are.
    """
    if not isinstance(error, psycopg.Error):
        return False
    return passes(error, connection_closed=isinstance(error, CONNECTION_ERRORS) and not error.sqlstate)


NO_ROOM = ("too many clients", "too many connections", "remaining connection slots are reserved")
"""How the server words a refused connection when it has no room (SQLSTATE 53300, which a failed connect
does not report as such)."""


REFUSED = ("does not exist", "authentication failed", "no pg_hba.conf entry", "no password supplied")
"""How the server (or libpq) words a connection turned down for where or as whom it was asked: no such database
or role, a login refused. A failed connect reports no SQLSTATE, so the words are all there is to go on."""


def refused(error: BaseException) -> bool:
    """Whether a connection failed because the server will not have it (no such database, a refused login),
    not because it could not be reached: a caller that cannot wait (a command line) stops at once.

    >>> refused(psycopg.OperationalError('connection failed: … failed: FATAL:  database "x" does not exist'))
    True
    >>> refused(psycopg.OperationalError('connection failed: … port 5999 failed: Connection refused'))
    False
    """
    return isinstance(error, CONNECTION_ERRORS) and any(words in str(error) for words in REFUSED)


def connect_failure(error: BaseException) -> str:
    """Where a connection failed and why, in one line and without the password: ``database "jobs" on
    10.0.0.5:5432 as "sync": Connection refused`` (what libpq tried, defaults filled in)."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    reason = reason.rpartition(" failed: ")[2].removeprefix("FATAL:").strip()
    pgconn = getattr(error, "pgconn", None)
    if pgconn is None:
        return reason

    def text(value: bytes | None) -> str:
        return (value or b"").decode("utf-8", "replace")

    return f"database {text(pgconn.db)!r} on {text(pgconn.host)}:{text(pgconn.port)} as {text(pgconn.user)!r}: {reason}"


def describe(error: BaseException) -> str:
    """The error for a log line or a message, naming a server without room for another connection."""
    text = str(error).strip()
    if any(words in text for words in NO_ROOM):
        return (
            f"the server has no room for another connection (too many clients: its max_connections, or the "
            f"role's CONNECTION LIMIT, is reached): {text}"
        )
    return text


@dataclass
class Backoff:
    """Waits that double from ``first`` up to ``cap`` seconds, each jittered, until ``give_up_after`` seconds.

    Jitter (each wait drawn from its upper half) keeps many workers that lost the database together from
    all coming back in the same instant.
    """

    first: float = 0.1
    cap: float = 5.0
    give_up_after: float = 300.0
    _delay: float = field(init=False)
    _deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self._delay = self.first
        self._deadline = time.monotonic() + self.give_up_after

    def next(self) -> float | None:
        """The wait before the next try, or None when it would end after the deadline (time to give up)."""
        delay = self._delay
        if time.monotonic() + delay > self._deadline:
            return None
        self._delay = min(delay * 2, self.cap)
        return delay * random.uniform(0.5, 1.0)
