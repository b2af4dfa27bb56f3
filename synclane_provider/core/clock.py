"""Where SyncLane's time comes from: the database by default, or a clock a test pins.

Every statement takes ``now``: None means the database's own time (one clock for every process sharing the
table), a datetime pins it. Planning, due times, delays and leases all follow the clock they are given, so a
test of a declaration moves time forward in one call instead of waiting for a period boundary::

    clock = PinnedClock(datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc))
    ops = Operations(synclane, database, clock=clock)
    pool = WorkerPool(synclane, database, "shops", clock=clock)
    ops.plan("shops")                # the history slices and the recurring job due at 10:15
    pool.drain()
    clock.advance(timedelta(minutes=15))
    ops.plan("shops")                # the next recurring window, 10:10 to 10:30 (with a 5-minute overlap)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

Clock = Callable[[], "datetime | None"]
"""What the engine asks for the time: a datetime, or None for the database's own time."""


def utc(now: datetime) -> datetime:
    """``now`` in UTC; a naive datetime is refused rather than guessed."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"times must be timezone-aware, got naive {now!r}")
    return now.astimezone(timezone.utc)


def database_clock() -> datetime | None:
    """The default clock: ``None`` tells every statement to use the database's own time."""
    return None


class PinnedClock:
    """A clock that only moves when told to. Thread-safe enough for tests: reads and moves are single steps."""

    def __init__(self, now: datetime) -> None:
        self.now = utc(now)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward by ``delta``; returns the new time."""
        if delta < timedelta(0):
            raise ValueError(f"a pinned clock only moves forward, got {delta}")
        self.now += delta
        return self.now

    def set(self, now: datetime) -> datetime:
        """Move the clock to ``now`` (forward only); returns it."""
        return self.advance(utc(now) - self.now)

    def __repr__(self) -> str:
        return f"PinnedClock({self.now.isoformat()})"
