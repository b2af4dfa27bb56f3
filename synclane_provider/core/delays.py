"""How long a job waits before its next attempt: pure functions of the attempt number."""

from __future__ import annotations

from datetime import timedelta


def backoff(attempt: int, base: timedelta, cap: timedelta) -> timedelta:
    """``base`` doubled per attempt after the first, never more than ``cap``.

    >>> backoff(1, timedelta(minutes=1), timedelta(hours=1))
    datetime.timedelta(seconds=60)
    >>> backoff(4, timedelta(minutes=1), timedelta(hours=1))
    datetime.timedelta(seconds=480)
    >>> backoff(30, timedelta(minutes=1), timedelta(hours=1))
    datetime.timedelta(seconds=3600)
    """
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt}")
    seconds = base.total_seconds() * 2.0 ** min(attempt - 1, 64)
    return cap if seconds >= cap.total_seconds() else timedelta(seconds=seconds)
