"""A server's Retry-After header, read as the wait a throttled job keeps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from synclane_provider.core import JobThrottled, parse_retry_after

NOW = datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("header", "wait"),
    [
        ("120", timedelta(seconds=120)),
        (" 3 ", timedelta(seconds=3)),
        (b"7", timedelta(seconds=7)),
        (0, timedelta(0)),
        (2.5, timedelta(seconds=2.5)),
        ("Mon, 30 Nov 2026 10:20:30 GMT", timedelta(seconds=30)),  # IMF-fixdate
        ("Monday, 30-Nov-26 10:21:00 GMT", timedelta(minutes=1)),  # RFC 850, obsolete but still sent
        ("Mon Nov 30 10:25:00 2026", timedelta(minutes=5)),  # asctime
        ("Mon, 30 Nov 2026 10:00:00 GMT", timedelta(0)),  # in the past: now
    ],
)
def test_seconds_and_http_dates_are_read_as_the_wait(header, wait):
    assert parse_retry_after(header, now=NOW) == wait


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "soon",
        "-3",
        "1.5",
        "١٢",
        -1,
        float("nan"),
        True,
        10**12,
        "99999999999999999999",
        "Mon, 30 Nov 2099 10:20:30 GMT",
    ],
)
def test_a_missing_unreadable_or_absurd_header_gives_no_wait(header):
    assert parse_retry_after(header, now=NOW) is None


def test_the_wait_goes_straight_into_a_throttle():
    assert JobThrottled("429", retry_after=parse_retry_after("30")).retry_after == timedelta(seconds=30)
    assert JobThrottled("429", retry_after=parse_retry_after(None)).retry_after is None  # the queue's own delay
