"""Reading an HTTP ``Retry-After`` header as the wait to hand to :class:`~synclane_provider.core.errors.JobThrottled`.

A server says either how many seconds to wait (``Retry-After: 120``) or until when (``Retry-After: Wed, 21
Oct 2026 07:28:00 GMT``), RFC 9110 section 10.2.3. Either way the job should wait exactly that long; when the
header is missing or unreadable, the queue's own throttle delay is the better guess, so the answer is None.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from synclane_provider.core.errors import JobThrottled
from synclane_provider.core.rate_headers import read_rate_headers


def parse_retry_after(value: str | bytes | int | float | None, *, now: datetime | None = None) -> timedelta | None:
    """The wait a ``Retry-After`` header names, or None when there is none to read.

    Seconds (``"120"``, or a number) or an HTTP date, measured from ``now`` (default: the current time); a
    date in the past means "now" (a zero wait). None for a missing, empty or unreadable header and for a
    wait longer than :attr:`JobThrottled.MAX_RETRY_AFTER` (a misread header, not a plan).

    >>> parse_retry_after("120")
    datetime.timedelta(seconds=120)
    >>> from datetime import timezone
    >>> parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now=datetime(2026, 10, 21, 7, 27, 30, tzinfo=timezone.utc))
    datetime.timedelta(seconds=30)
    >>> parse_retry_after("soon") is None
    True
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, (int, float)):
        return _seconds(value)
    return _from_text(value.strip(), now)


def _seconds(seconds: float) -> timedelta | None:
    if not 0 <= seconds <= JobThrottled.MAX_RETRY_AFTER.total_seconds():  # also refuses NaN
        return None
    return timedelta(seconds=seconds)


def _from_text(text: str, now: datetime | None) -> timedelta | None:
    """The header read by the one rule every response's headers go through."""
    news = read_rate_headers([("Retry-After", text)], now=now)
    return news.retry_after if news else None
