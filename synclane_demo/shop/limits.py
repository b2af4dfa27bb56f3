"""The shop's rate limits, as a real API keeps them: per seller (acme-us and acme-eu are both acme), and a named wait.

Two rules, checked as each data request arrives, before anything else:

* **Rate limit.** A seller with a limit (``acme=2``: two requests a second) gets 429 for a request that makes
  more than that in the last second (``Retry-After: 1``). Counted as ``429_over_limit``: a client that keeps to
  its budget never sees one.
* **Named wait.** After any 429 that names a wait (the random ones included), every request of the seller
  until the wait is over gets 429 too, naming what is left. Counted as ``429_ignored_wait``: a client that
  holds the whole seller back when told (not just the one job that was told) never sees one.

Random 429s (:mod:`~synclane_demo.shop.faults`) are counted as ``429_random``; each is one throttle event.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

WINDOW = 1.0
"""Seconds over which a rate limit counts requests."""


def parse_limits(text: str) -> dict[str, int]:
    """``"acme=2,globex=5"`` as ``{"acme": 2, "globex": 5}``; empty for ``""``. A bad entry is named.

    >>> parse_limits("acme=2, globex=5")
    {'acme': 2, 'globex': 5}
    """
    limits: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        seller, _, number = entry.partition("=")
        if not seller.strip() or not number.strip().isdigit() or int(number) < 1:
            raise ValueError(f"a rate limit is written seller=N (N requests a second, at least 1), got {entry!r}")
        limits[seller.strip()] = int(number)
    return limits


@dataclass(frozen=True)
class Refusal:
    """A 429 the limits answer with: why (the counter's name) and the wait to name."""

    reason: str
    retry_after: int


@dataclass
class Limits:
    """Per-seller rate limits and named waits, shared by every request thread; counts what it answered."""

    per_second: dict[str, int] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for seller, limit in self.per_second.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"the rate limit of {seller!r} must be a positive integer, got {limit!r}")
        self._arrivals: defaultdict[str, deque[float]] = defaultdict(deque)
        self._waiting_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def arrive(self, seller: str, now: float | None = None) -> Refusal | None:
        """A request of ``seller`` arrives: a refusal, or None to answer it."""
        now = time.monotonic() if now is None else now
        with self._lock:
            arrivals = self._arrivals[seller]
            arrivals.append(now)
            while arrivals and arrivals[0] <= now - WINDOW:
                arrivals.popleft()
            until = self._waiting_until.get(seller, 0.0)
            if now < until:
                self.counters["429_ignored_wait"] += 1
                return Refusal("429_ignored_wait", max(math.ceil(until - now), 1))
            limit = self.per_second.get(seller)
            if limit is not None and len(arrivals) > limit:
                self.counters["429_over_limit"] += 1
                return Refusal("429_over_limit", 1)
            return None

    def named_wait(self, seller: str, seconds: float, now: float | None = None) -> None:
        """A 429 told ``seller`` to wait ``seconds``: its requests until then are refused."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._waiting_until[seller] = max(self._waiting_until.get(seller, 0.0), now + seconds)

    def count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def status(self) -> dict:
        with self._lock:
            return {"rate_limits": dict(self.per_second), "counters": dict(self.counters)}
