"""The windows of a re-sync: a range of one type fetched again, cut like history, as a pure function.

A re-sync covers exactly ``[start, end)``: its first window starts at ``start``, its last ends at ``end``, and
no window is longer than the type's slice. Where the range meets the owner's history, it is cut where the
history is (:class:`~synclane_provider.core.plan.rule.History`: back from the midnight of the owner's first
plan), so that each window lies within one history slice and re-syncing exactly one history slice makes exactly
that window. The rest of the range -- all of it for an owner without history, and the parts before its oldest
slice and after its newest one -- is cut on the type's slices counted from a midnight (UTC): the midnight of
that part's end's day, back and (for slices shorter than a day) forward; a part that ends between two boundaries
begins with the piece after the last one. A range within one slice is one window. Newest first, like history,
so a re-sync that is stopped halfway has fetched the most recent part.

Its jobs are manual jobs whose keys carry the request's key, so that neither the planner's coverage nor an
owner's lag or initial-load progress ever reads them; they are numbered after every declared type
(:func:`resync_priority`), so that within a lane any planned job that is due -- the recurring window above all --
goes before them.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

from synclane_provider.core.clock import utc
from synclane_provider.core.declare.declarations import JobType, SnapshotType, WindowedType
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.plan.rule import History, instant_text, midnight, slices_back

RESYNC_PRIORITY = 1_000_000
"""Added to a type's declared position to give its re-sync jobs' priority: after every planned and enqueued job
of the queue, in declared type order among themselves."""

MAX_JOBS = 100_000
"""The most jobs one request may make: a larger range (or every owner of a large source) is refused with the
count, to be asked for in parts or with a longer slice."""


def resync_windows(
    job_type: JobType, start: datetime, end: datetime, history: History | None = None
) -> tuple[tuple[datetime, datetime], ...]:
    """The windows that cover ``[start, end)`` for ``job_type`` and an owner with ``history`` (None: without
    any), newest first; empty for a snapshot type.

    >>> from datetime import timedelta, timezone
    >>> from synclane_provider.core.declare.declarations import WindowedType
    >>> def shop(job): ...
    >>> orders = WindowedType("orders", shop, every=timedelta(hours=1), horizon=timedelta(days=45),
    ...                       slice=timedelta(days=30))
    >>> d = lambda month, day, hour=0: datetime(2026, month, day, hour, tzinfo=timezone.utc)
    >>> days = lambda windows: [f"[{a:%m-%d}, {b:%m-%d})" for a, b in windows]

    October for an owner without history: back from November's first midnight.

    >>> days(resync_windows(orders, d(10, 1), d(11, 1)))
    ['[10-02, 11-01)', '[10-01, 10-02)']

    For an owner first planned on November 30th, whose 45 days of history are [10-31, 11-30) and the clipped
    [10-16, 10-31): cut where its history is, and before it as without history.

    >>> acme = History(oldest=d(10, 16), anchor=d(11, 30))
    >>> days(resync_windows(orders, d(10, 1), d(11, 1), acme))
    ['[10-31, 11-01)', '[10-16, 10-31)', '[10-01, 10-16)']
    >>> days(resync_windows(orders, d(10, 16), d(10, 31), acme)), days(resync_windows(orders, d(10, 31), d(11, 30), acme))
    (['[10-16, 10-31)'], ['[10-31, 11-30)'])

    After the newest history slice, as without history: back from the midnight of the range's end.

    >>> days(resync_windows(orders, d(11, 20), d(12, 31), acme))
    ['[12-01, 12-31)', '[11-30, 12-01)', '[11-20, 11-30)']

    Slices shorter than a day are counted forward from the midnight too; a range within one slice is one window.

    >>> hourly = WindowedType("orders", shop, every=timedelta(hours=1), horizon=timedelta(days=365),
    ...                       slice=timedelta(hours=6))
    >>> [(a.hour, b.hour) for a, b in resync_windows(hourly, d(3, 3, 2), d(3, 3, 9))]
    [(6, 9), (2, 6)]
    >>> [(a.hour, b.hour) for a, b in resync_windows(orders, d(3, 3, 2), d(3, 3, 9))]
    [(2, 9)]
    """
    start, end = checked_range(start, end)
    if isinstance(job_type, SnapshotType):
        return ()
    if not isinstance(job_type, WindowedType):
        raise TypeError(f"cannot re-sync job type {job_type!r}")
    length = job_type.slice
    if history is None:
        return _cut(start, end, midnight(end), length)
    after = _cut(max(start, history.anchor), end, midnight(end), length) if end > history.anchor else ()
    low, high = max(start, history.oldest), min(end, history.anchor)
    within = _cut(low, high, history.anchor, length) if low < high else ()
    before = min(end, history.oldest)
    return after + within + (_cut(start, before, midnight(before), length) if start < before else ())


def _cut(start: datetime, end: datetime, anchor: datetime, length: timedelta) -> tuple[tuple[datetime, datetime], ...]:
    """``[start, end)`` cut at ``anchor + k * length`` for every whole k, newest first."""
    top = anchor + ((end - anchor) // length) * length  # the last boundary at or before end
    windows: tuple[tuple[datetime, datetime], ...] = ((max(top, start), end),) if end > top else ()
    return windows + (slices_back(top, start, length) if top > start else ())


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


_WRITTEN_DAY = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


def range_day(name: str, value: object) -> datetime:
    """A bound of a re-sync's range written as a day, ``YYYY-MM-DD``, as that day's midnight UTC: how the page's
    form and the ``synclane_resync`` DAG's form take ``start`` and ``end``. Anything else -- nothing, an empty or
    garbled text, a day the calendar lacks, an instant -- is refused in one line naming ``name`` and the value, so
    a bad form is refused before anything is written.

    >>> range_day("start", "2026-03-01")
    datetime.datetime(2026, 3, 1, 0, 0, tzinfo=datetime.timezone.utc)
    >>> range_day("end", "2026-02-30")
    Traceback (most recent call last):
    ...
    synclane_provider.core.errors.DeclarationError: end of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got '2026-02-30'
    >>> range_day("start", None)
    Traceback (most recent call last):
    ...
    synclane_provider.core.errors.DeclarationError: start of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got None
    """
    if isinstance(value, str) and _WRITTEN_DAY.fullmatch(value):
        try:
            day = date.fromisoformat(value)
        except ValueError:
            pass
        else:
            return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    raise DeclarationError(
        f"{name} of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got {value!r}"
    )


def resync_key(request: str, window_start: datetime | None) -> str:
    """The dedup key of a request's job: ``resync:<request>:<window start>``, or ``resync:<request>`` for a
    snapshot. Unique per request and window, so a request made twice inserts nothing the second time."""
    return f"resync:{request}" if window_start is None else f"resync:{request}:{instant_text(window_start)}"


def resync_priority(position: int) -> int:
    """The priority of a re-sync job of the type declared at ``position``."""
    return RESYNC_PRIORITY + position
