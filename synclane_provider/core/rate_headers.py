"""What an HTTP response's headers say about the API's rate limit, read as one :class:`RateNews`.

A lane's budget is declared up front (:class:`~synclane_provider.core.declare.ratelimit.Rate`), but the API
knows better: most answers say how many requests are left and when the window resets. A handler hands the
headers over (``job.observe(response.headers)``) and the lane steers by them. Servers write this in a handful of
dialects, all read here:

- ``X-RateLimit-Limit``/``-Remaining``/``-Reset`` (also ``X-Rate-Limit-…`` and ``X-RateLimit-Reset-After``):
  GitHub and most others. A reset above :data:`EPOCH_AFTER` is an instant (Unix time), below it a wait.
- ``RateLimit-Limit``/``-Remaining``/``-Reset`` and ``RateLimit: limit=…, remaining=…, reset=…``: the older
  IETF drafts (draft-ietf-httpapi-ratelimit-headers up to 07), with ``RateLimit-Policy: 100;w=60``.
- ``RateLimit-Policy: "burst";q=100;w=60`` and ``RateLimit: "burst";r=50;t=30``: the newer drafts (08 on),
  policies and their state matched by name.
- ``Retry-After``: seconds or an HTTP date (RFC 9110 section 10.2.3).
- ``X-Shopify-Shop-Api-Call-Limit: 32/40``: requests used of the limit, no reset.

When a response names several limits (``X-RateLimit-Limit: 100, 1000``, or several policies) the news is the
most constraining one: an exhausted window first, else the one with the slowest :attr:`RateNews.pace`.

A response is not a declaration: a value that cannot be read (text, a negative number, a wait longer than
:attr:`~synclane_provider.core.errors.JobThrottled.MAX_RETRY_AFTER`) is left out and the rest is still read,
and nothing here raises on what a server sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from synclane_provider.core.errors import JobThrottled

EPOCH_AFTER = 1_000_000_000
"""A reset of more seconds than this is an instant in Unix time (GitHub's ``X-RateLimit-Reset``), not a wait:
10⁹ seconds is 31 years as a wait, and September 2001 as an instant."""

_DECIMAL = re.compile(r"\d+(?:\.\d+)?", re.ASCII)
_SHOPIFY = re.compile(r"(\d+)\s*/\s*(\d+)", re.ASCII)
_X_PREFIXES = ("x-ratelimit-", "x-rate-limit-")


@dataclass(frozen=True)
class RateNews:
    """What one response said about its rate limit; what it did not say is None.

    >>> news = RateNews(limit=100, remaining=19, reset=timedelta(seconds=10))
    >>> news.pace, news.exhausted
    (datetime.timedelta(microseconds=500000), False)
    """

    limit: int | None = None
    """Requests the current window allows."""
    remaining: int | None = None
    """Requests left in it."""
    reset: timedelta | None = None
    """Until that window resets."""
    window: timedelta | None = None
    """The window's length, when a policy names it."""
    retry_after: timedelta | None = None
    """The ``Retry-After`` wait."""

    @property
    def exhausted(self) -> bool:
        """Whether no request is left in the window: the next one waits for :attr:`reset`."""
        return self.remaining == 0

    @property
    def pace(self) -> timedelta | None:
        """The spacing that spends what is left evenly until the reset, the reset bringing the next one:
        ``reset / (remaining + 1)``. A fixed window of 600 a minute reads 599 left for 60 s, a spacing of
        0.1 s; a sliding window of 2 a second read right after a lone request says 1 left for 1 s, and 0.5 s
        keeps to its rate, where ``reset / remaining`` would settle at half of it.

        None when either is unknown, and when nothing is left (then :attr:`exhausted` is what counts).
        """
        if self.remaining is None or self.reset is None or self.exhausted:
            return None
        return self.reset / (self.remaining + 1)


def read_rate_headers(headers: Any, *, now: datetime | None = None) -> RateNews | None:
    """What ``headers`` say about the rate limit, or None when they say nothing about it.

    ``headers`` is a mapping (a dict, requests' ``CaseInsensitiveDict``, ``httpx.Headers``), an
    ``email.message.Message`` (urllib's ``response.headers``), an iterable of ``(name, value)`` pairs, or a
    response with a ``.headers`` attribute; names are case-insensitive. ``now`` (default: the current time)
    turns an epoch reset or an HTTP-date ``Retry-After`` into a wait.

    >>> read_rate_headers({"X-RateLimit-Limit": "100, 1000", "X-RateLimit-Remaining": "90, 10",
    ...                    "X-RateLimit-Reset": "60, 3600"})
    RateNews(limit=1000, remaining=10, reset=datetime.timedelta(seconds=3600), window=None, retry_after=None)
    >>> read_rate_headers({"Content-Type": "application/json"}) is None
    True
    """
    fields = _fields(headers)
    now = _aware(now or datetime.now(timezone.utc))
    windows = [
        news for news in (*_x_ratelimit(fields, now), *_ietf(fields, now), *_shopify(fields)) if news != RateNews()
    ]
    tightest = max(windows, key=_tightness, default=None)
    retry_after = _retry_after(fields.get("retry-after"), now)
    if tightest is None and retry_after is None:
        return None
    return replace(tightest or RateNews(), retry_after=retry_after)


def _tightness(news: RateNews) -> tuple[bool, timedelta, float]:
    """An exhausted window first (the latest reset among them), then the slowest pace, then the fewest left."""
    wait = news.reset if news.exhausted else news.pace
    return news.exhausted, wait or timedelta(0), -(math.inf if news.remaining is None else news.remaining)


def _fields(headers: Any) -> dict[str, str]:
    """Each field's value by its lower-case name; a field sent more than once is one list, as HTTP combines them."""
    if isinstance(headers, (str, bytes)):
        raise TypeError(f"headers must be a mapping, a message, (name, value) pairs or a response, not {headers!r}")
    if not hasattr(headers, "items") and hasattr(headers, "headers"):
        return _fields(headers.headers)
    pairs = headers.items() if hasattr(headers, "items") else headers
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(_text(name).strip().lower(), []).append(_text(value).strip())
    return {name: ", ".join(value for value in listed if value) for name, listed in values.items()}


def _text(value: object) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _aware(now: datetime) -> datetime:
    return now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)


def _x_ratelimit(fields: Mapping[str, str], now: datetime) -> Iterator[RateNews]:
    """``X-RateLimit-*`` and ``X-Rate-Limit-*``, each a list of one window per position."""
    for prefix in _X_PREFIXES:
        yield from _aligned(
            fields, prefix + "limit", prefix + "remaining", (prefix + "reset-after", prefix + "reset"), now
        )


def _aligned(
    fields: Mapping[str, str], limit: str, remaining: str, resets: tuple[str, ...], now: datetime
) -> Iterator[RateNews]:
    """Windows from separate limit, remaining and reset fields whose lists line up by position.

    Of ``resets``, the first field readable at a position is taken (a wait before an instant, which a skewed
    clock would misread). A limit item's ``w`` parameter is its window (``RateLimit-Limit: 100;w=60``).
    """
    limits, remainders = _members(fields.get(limit, "")), _members(fields.get(remaining, ""))
    reset_lists = [_members(fields.get(name, "")) for name in resets]
    for position in range(max(len(limits), len(remainders), *map(len, reset_lists))):
        limit_item, params = limits[position] if position < len(limits) else ("", {})
        waits = (_reset(found[position][0], now) for found in reset_lists if position < len(found))
        reset = next((wait for wait in waits if wait is not None), None)
        yield RateNews(
            limit=_count(limit_item),
            remaining=_count(remainders[position][0]) if position < len(remainders) else None,
            reset=reset,
            window=_seconds(_decimal(params.get("w", ""))),
        )


def _ietf(fields: Mapping[str, str], now: datetime) -> Iterator[RateNews]:
    """The IETF drafts' fields: ``RateLimit-Limit``/``-Remaining``/``-Reset``, ``RateLimit`` and ``RateLimit-Policy``.

    A named policy (``"burst";q=100;w=60``) goes with the ``RateLimit`` item of the same name; an unnamed one
    (``100;w=60``, or an item of ``RateLimit-Limit`` with a ``w``) gives its window to the state whose limit
    equals its quota. A policy with no state of its own is still a window, with nothing known of what is left.
    """
    named: dict[str, RateNews] = {}
    unnamed: list[RateNews] = []
    for item, params in _members(fields.get("ratelimit-policy", "")):
        window = _seconds(_decimal(params.get("w", "")))
        if (quota := _count(item)) is not None:
            unnamed.append(RateNews(limit=quota, window=window))
        else:
            named[_unquoted(item)] = RateNews(limit=_count(params.get("q", "")), window=window)
    states = list(_aligned(fields, "ratelimit-limit", "ratelimit-remaining", ("ratelimit-reset",), now))
    members = _members(fields.get("ratelimit", ""))
    if any("=" in item for item, _ in members):  # draft 07 and before: one dictionary
        found = {
            key.strip().lower(): value for key, value in (item.split("=", 1) for item, _ in members if "=" in item)
        }
        states.append(
            RateNews(
                limit=_count(found.get("limit", "")),
                remaining=_count(found.get("remaining", "")),
                reset=_reset(found.get("reset", ""), now),
            )
        )
    else:
        for item, params in members:
            policy = named.pop(_unquoted(item), RateNews())
            yield replace(policy, remaining=_count(params.get("r", "")), reset=_reset(params.get("t", ""), now))
    windows = unnamed + [state for state in states if state.window is not None]  # draft 03: 10, 10;w=1
    for state in states:
        match = next((policy for policy in windows if state.window is None and policy.limit == state.limit), None)
        yield replace(state, window=match.window) if match else state
    yield from named.values()
    yield from unnamed


def _shopify(fields: Mapping[str, str]) -> Iterator[RateNews]:
    """Shopify's ``X-Shopify-Shop-Api-Call-Limit: used/limit`` (its bucket leaks steadily: no reset to name)."""
    if match := _SHOPIFY.fullmatch(fields.get("x-shopify-shop-api-call-limit", "")):
        used, limit = int(match.group(1)), int(match.group(2))
        yield RateNews(limit=limit, remaining=max(limit - used, 0))


def _members(value: str) -> list[tuple[str, dict[str, str]]]:
    """A list field's members, each its item and its parameters: ``"a";q=1, 5;w=60`` →
    ``[('"a"', {'q': '1'}), ('5', {'w': '60'})]``. Commas and semicolons inside quotes stay where they are."""
    members = []
    for member in _split(value, ","):
        item, *params = _split(member, ";")
        named = (param.split("=", 1) for param in params if "=" in param)
        members.append((item.strip(), {key.strip().lower(): _unquoted(found) for key, found in named}))
    return [(item, params) for item, params in members if item or params]


def _split(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    return [*parts, "".join(current)]


def _unquoted(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _decimal(text: str) -> float | None:
    """A non-negative decimal number (``10``, ``10.0``); None for anything else, a sign or an exponent included."""
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def _count(text: str) -> int | None:
    """A number of requests: whole digits exactly, a decimal rounded down (a fraction of a request is not one)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    number = _decimal(text)
    return None if number is None else math.floor(number)


def _seconds(seconds: float | None) -> timedelta | None:
    if seconds is None or not 0 <= seconds <= JobThrottled.MAX_RETRY_AFTER.total_seconds():
        return None
    return timedelta(seconds=seconds)


def _reset(text: str, now: datetime) -> timedelta | None:
    """A reset as the wait until it: seconds, or above :data:`EPOCH_AFTER` an instant (passed: no wait)."""
    seconds = _decimal(text)
    if seconds is None or seconds <= EPOCH_AFTER:
        return _seconds(seconds)
    try:
        until = datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return _until(until, now)


def _until(until: datetime, now: datetime) -> timedelta | None:
    wait = max(until - now, timedelta(0))
    return wait if wait <= JobThrottled.MAX_RETRY_AFTER else None


def _retry_after(value: str | None, now: datetime) -> timedelta | None:
    """``Retry-After``: whole seconds or an HTTP date (RFC 9110 allows nothing else, so ``1.5`` is unread)."""
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return _seconds(int(value))
    try:
        until = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return _until(_aware(until), now)  # an HTTP date is always GMT
