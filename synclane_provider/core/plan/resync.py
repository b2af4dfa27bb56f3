"""The windows of a re-sync: a range of one type fetched again, cut like history, as a pure function.

A re-sync covers exactly ``[start, end)``: its first window starts at ``start``, its last ends at ``end``, and
the cuts between them fall where history's would, on the type's slices counted from a midnight (UTC): the
midnight of ``end``'s day, back and (for slices shorter than a day) forward. A range that ends between two
boundaries begins with the piece after the last one; a range within one slice is one window. Newest first, like history, so a re-sync that is stopped halfway has fetched the most recent part.

Its jobs are manual jobs whose keys carry the request's key, so that neither the planner's coverage nor an
owner's lag or initial-load progress ever reads them; they are numbered after every declared type
(:func:`resync_priority`), so that within a lane any planned job that is due -- the recurring window above all --
goes before them.
"""

from __future__ import annotations

from datetime import datetime

from synclane_provider.core.clock import utc
from synclane_provider.core.declare.declarations import JobType, SnapshotType, WindowedType
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.plan.rule import instant_text, midnight, slices_back

RESYNC_PRIORITY = 1_000_000
"""Added to a type's declared position to give its re-sync jobs' priority: after every planned and enqueued job
of the queue, in declared type order among themselves."""

MAX_JOBS = 100_000
"""The most jobs one request may make: a larger range (or every owner of a large source) is refused with the
count, to be asked for in parts or with a longer slice."""


def resync_windows(job_type: JobType, start: datetime, end: datetime) -> tuple[tuple[datetime, datetime], ...]:
    """The windows that cover ``[start, end)`` for ``job_type``, newest first; empty for a snapshot type.

    >>> from datetime import timedelta, timezone
    >>> from synclane_provider.core.declare.declarations import WindowedType
    >>> def every_ten_days(job): ...
    >>> orders = WindowedType("orders", every_ten_days, every=timedelta(hours=1), horizon=timedelta(days=365),
    ...                       slice=timedelta(days=10))
    >>> d = lambda day, hour=0: datetime(2026, 3, day, hour, tzinfo=timezone.utc)
    >>> [(a.day, a.hour, b.day, b.hour) for a, b in resync_windows(orders, d(1, 6), d(25, 12))]
    [(25, 0, 25, 12), (15, 0, 25, 0), (5, 0, 15, 0), (1, 6, 5, 0)]
    >>> [(a.hour, b.hour) for a, b in resync_windows(orders, d(3, 2), d(3, 9))]
    [(2, 9)]
    >>> hourly = WindowedType("orders", every_ten_days, every=timedelta(hours=1), horizon=timedelta(days=365),
    ...                       slice=timedelta(hours=6))
    >>> [(a.hour, b.hour) for a, b in resync_windows(hourly, d(3, 2), d(3, 9))]
    [(6, 9), (2, 6)]
    """
    start, end = checked_range(start, end)
    if isinstance(job_type, SnapshotType):
        return ()
    if not isinstance(job_type, WindowedType):
        raise TypeError(f"cannot re-sync job type {job_type!r}")
    anchor = midnight(end)
    top = anchor + ((end - anchor) // job_type.slice) * job_type.slice  # the last boundary at or before end
    windows: list[tuple[datetime, datetime]] = []
    if end > top:
        windows.append((max(top, start), end))
    if top > start:
        windows.extend(slices_back(top, start, job_type.slice))
    return tuple(windows)


def checked_range(start: object, end: object) -> tuple[datetime, datetime]:
    """``(start, end)`` in UTC when both are timezone-aware datetimes and start is before end, else refused."""
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise DeclarationError(f"{name} of a re-sync must be a timezone-aware datetime, got {value!r}")
    assert isinstance(start, datetime) and isinstance(end, datetime)
    if start >= end:
        raise DeclarationError(
            f"a re-sync's start ({instant_text(start)}) must be before its end ({instant_text(end)})"
        )
    return utc(start), utc(end)


def resync_key(request: str, window_start: datetime | None) -> str:
    """The dedup key of a request's job: ``resync:<request>:<window start>``, or ``resync:<request>`` for a
    snapshot. Unique per request and window, so a request made twice inserts nothing the second time."""
    return f"resync:{request}" if window_start is None else f"resync:{request}:{instant_text(window_start)}"


def resync_priority(position: int) -> int:
    """The priority of a re-sync job of the type declared at ``position``."""
    return RESYNC_PRIORITY + position
