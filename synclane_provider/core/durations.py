"""Durations as people write and read them: ``90s``, ``5m``, ``2h``, ``730d`` in, ``1 h 30 min`` out.

One parser for every place a duration arrives as text or a number (operator arguments rendered from
templates, the ``[synclane]`` configuration, the demo's environment), and one way to print one in a message.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from synclane_provider.core.errors import DeclarationError

_WRITTEN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*$")
_UNIT_SECONDS = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(name: str, value: object, *, positive: bool = True) -> timedelta:
    """``value`` as a timedelta: a timedelta, a number of seconds, or text like ``90s``, ``5m``, ``2h``,
    ``730d`` (a bare number is seconds). Anything else is a :class:`DeclarationError` naming ``name``.

    >>> parse_duration("lease", "90s"), parse_duration("lease", 2.5), parse_duration("lease", "1.5h")
    (datetime.timedelta(seconds=90), datetime.timedelta(seconds=2, microseconds=500000), datetime.timedelta(seconds=5400))
    """
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise DeclarationError(f"{name} must be a duration, got {value!r}")
        duration = timedelta(seconds=value)
    elif isinstance(value, str) and (match := _WRITTEN.match(value)):
        duration = timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    else:
        raise DeclarationError(
            f"{name} must be a duration: a timedelta, a number of seconds, or text like 90s, 5m, 2h or 730d; "
            f"got {value!r}"
        )
    if positive and duration <= timedelta(0):
        raise DeclarationError(f"{name} must be positive, got {duration_text(duration)}")
    return duration


def duration_text(value: timedelta) -> str:
    """A duration the way people write it, for messages: ``30 days``, ``1 h 30 min``, ``-1 s``, ``0.25 s``.

    From a minute up, seconds are whole (a lag measured to the microsecond reads ``5 min 24 s``); below, two
    decimals at most.

    >>> duration_text(timedelta(days=1, minutes=90)), duration_text(timedelta(seconds=-1))
    ('1 day 1 h 30 min', '-1 s')
    >>> duration_text(timedelta(seconds=323.8643)), duration_text(timedelta(seconds=2.4567))
    ('5 min 24 s', '2.46 s')
    """
    seconds = value.total_seconds()
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    seconds = round(seconds) if seconds >= 60 else round(seconds, 2)
    parts = []
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count, seconds = divmod(seconds, size)
            parts.append(f"{count:.0f} {unit}" + ("s" if unit == "day" and count != 1 else ""))
    if seconds or not parts:
        parts.append(f"{seconds:g} s")
    return sign + " ".join(parts)
