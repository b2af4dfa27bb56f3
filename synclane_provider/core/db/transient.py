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
