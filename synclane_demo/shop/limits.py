"""The shop's rate limits, as a real API keeps them: per seller (acme-us and acme-eu are both acme), and a named wait.

Two rules, checked as each data request arrives, before anything else:

* **Rate limit.** A seller with a limit (``acme=2``: two requests a second) gets 429 for a request that makes
  more than that in the last second (``Retry-After: 1``). Counted as ``429_over_limit``: a client that keeps to
  its budget never sees one.
* **Named wait.** After any 429 that names a wait (the random ones included), every request of the seller
  until the wait is over gets 429 too, naming what is left. Counted as ``429_ignored_wait``: a client that
  holds the whole seller back when told (not just the one job that was told) never sees one.

Random 429s (:mod:`~synclane_demo.shop.faults`) are counted as ``429_random``; each is one throttle event.

**The limit is announced.** Every answer to a request of a seller with a limit, a 429 included, carries the
seller's :class:`Quota` as real APIs send theirs, so a client can learn the limit rather than be told it by
its configuration:

* ``X-RateLimit-Limit``: the seller's requests a second, now;
* ``X-RateLimit-Remaining``: how many more the current second allows, this request counted (0 when it was
  one too many);
* ``X-RateLimit-Reset``: seconds until the oldest request in the window leaves it; when none remain, until
  enough have left it for the next to be allowed (refused requests count in the window too, so after a burst
  that is more than the oldest's leaving). In thousandths rounded up: ``0.35``, ``1``. A fraction, as Discord's
  ``X-RateLimit-Reset-After`` is, because the window is one second: in whole seconds it would always read 1,
  saying nothing, and a client that waited for it would wait up to a second too long and fall below the very
  limit it learnt. (SyncLane's reader takes decimals; a reset this small is never read as a Unix instant.)

* ``RateLimit-Policy``: the window itself, as the IETF draft writes it: ``2;w=1`` (2 requests a window of one
  second), so a client can keep to the limit's own spacing even while nothing is left.

They describe the rate window only: a named wait shows in ``Retry-After``, not in them.

**The limit can change while the shop runs**: over ``POST /control/settings {"rate_limits": {"acme": 1}}``
(:meth:`Limits.change`), or on a schedule given at start (:func:`parse_limit_changes`,
``--limit-changes acme=1@5m,acme=2@10m``): a client that learnt the old limit meets the new one in the very next
answer's headers.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

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


def checked_limit(seller: str, limit: object) -> int:
    """``limit`` as a seller's requests a second: a positive integer, or a ValueError naming the seller."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"the rate limit of {seller!r} must be a positive integer, got {limit!r}")
    return limit


_UNITS = {"s": 1, "m": 60, "h": 3600}
_CHANGE = re.compile(r"^(?P<seller>[^\s=@,]+)\s*=\s*(?P<limit>\d+)\s*@\s*(?P<after>\d+(?:\.\d+)?)(?P<unit>[smh])$")


@dataclass(frozen=True)
class LimitChange:
    """A change of a seller's limit at a moment of the shop's life: ``acme=1@5m`` (1 request a second for acme
    from 5 minutes after the shop started)."""

    seller: str
    per_second: int
    after: float
    """Seconds after the shop started."""

    def __post_init__(self) -> None:
        checked_limit(self.seller, self.per_second)
        if not self.after >= 0:
            raise ValueError(f"a limit change comes at or after the shop's start, got {self.after!r} s")

    def __str__(self) -> str:
        """As it is written: ``acme=1@5m``."""
        for unit, size in (("h", 3600), ("m", 60)):
            if self.after >= size and self.after % size == 0:
                return f"{self.seller}={self.per_second}@{self.after / size:g}{unit}"
        return f"{self.seller}={self.per_second}@{self.after:g}s"


def parse_limit_changes(text: str) -> tuple[LimitChange, ...]:
    """``"acme=1@5m,acme=2@10m"`` as the changes it names, earliest first; none for ``""`` or ``"none"``.

    Each entry is ``seller=N@T``: from ``T`` after the shop started (``90s``, ``5m``, ``1.5h``: a number and its
    unit) the seller's limit is ``N`` requests a second. A bad entry, or two changes of one seller at one moment,
    is a ValueError naming it.

    >>> [str(change) for change in parse_limit_changes("acme=2@10m, acme=1@5m, globex=5@90s")]
    ['globex=5@90s', 'acme=1@5m', 'acme=2@10m']
    """
    if text.strip().lower() in ("", "none"):
        return ()
    changes: dict[tuple[str, float], tuple[str, LimitChange]] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        found = _CHANGE.match(entry)
        if found is None or int(found["limit"]) < 1:
            raise ValueError(
                "a limit change is written seller=N@T (N requests a second, at least 1, from T after the shop "
                f"started, T like 90s, 5m or 1.5h), got {entry!r}"
            )
        change = LimitChange(found["seller"], int(found["limit"]), float(found["after"]) * _UNITS[found["unit"]])
        if (change.seller, change.after) in changes:
            earlier, _ = changes[change.seller, change.after]
            raise ValueError(f"two limit changes of {change.seller!r} at one moment: {earlier!r} and {entry!r}")
        changes[change.seller, change.after] = (entry, change)
    return tuple(sorted((change for _, change in changes.values()), key=lambda change: change.after))


@dataclass(frozen=True)
class Refusal:
    """A 429 the limits answer with: why (the counter's name) and the wait to name."""

    reason: str
    retry_after: int


@dataclass(frozen=True)
class Quota:
    """A seller's rate limit as announced with an answer to it (see the module's docstring)."""

    limit: int
    remaining: int
    reset: float
    """Seconds, in thousandths rounded up (never 0: the oldest request is still in the window)."""

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": f"{self.reset:g}",
            "RateLimit-Policy": f"{self.limit};w={WINDOW:g}",
        }


@dataclass(frozen=True)
class Arrival:
    """What the limits make of one request as it arrives: its refusal (None: answer it), and the seller's quota
    to announce with the answer (None: the seller has no limit)."""

    refusal: Refusal | None = None
    quota: Quota | None = None

    def headers(self) -> dict[str, str]:
        """The ``X-RateLimit-*`` headers of every answer to this request (none for a seller without a limit); a
        refusal's ``Retry-After`` is the 429's to add."""
        return self.quota.headers() if self.quota is not None else {}


@dataclass
class Limits:
    """Per-seller rate limits and named waits, shared by every request thread; counts what it answered.

    ``changes`` are applied as their moment passes (``started`` + their ``after``, on the monotonic clock),
    checked at each arrival and status: a limit nobody asks about does not need to be current. A change over the
    control endpoint does not cancel the scheduled ones still to come.
    """

    per_second: dict[str, int] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    changes: tuple[LimitChange, ...] = ()
    started: float = field(default_factory=time.monotonic)
    """When the shop started, on the clock of ``now`` (``time.monotonic``): the scheduled changes count from it."""

    def __post_init__(self) -> None:
        for seller, limit in self.per_second.items():
            checked_limit(seller, limit)
        self._arrivals: defaultdict[str, deque[float]] = defaultdict(deque)
        self._waiting_until: dict[str, float] = {}
        self._due: deque[LimitChange] = deque(sorted(self.changes, key=lambda change: change.after))
        self._lock = threading.Lock()

    def arrive(self, seller: str, now: float | None = None) -> Arrival:
        """A request of ``seller`` arrives: whether to refuse it, and the quota to announce with the answer."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._apply_due(now)
            arrivals = self._arrivals[seller]
            arrivals.append(now)
            while arrivals and arrivals[0] <= now - WINDOW:
                arrivals.popleft()
            limit = self.per_second.get(seller)
            quota = None
            if limit is not None:
                frees = arrivals[max(len(arrivals) - limit, 0)] + WINDOW  # when the next request fits, if none do now
                reset = math.ceil(round((frees - now) * 1000, 6)) / 1000  # in thousandths up; 0.7000000001 is 0.7
                quota = Quota(limit, max(limit - len(arrivals), 0), reset)
            until = self._waiting_until.get(seller, 0.0)
            if now < until:
                self.counters["429_ignored_wait"] += 1
                return Arrival(Refusal("429_ignored_wait", max(math.ceil(until - now), 1)), quota)
            if limit is not None and len(arrivals) > limit:
                self.counters["429_over_limit"] += 1
                return Arrival(Refusal("429_over_limit", 1), quota)
            return Arrival(None, quota)

    def change(self, limits: Mapping[str, int]) -> None:
        """From now on these sellers' limits are ``limits`` (validated first: all of them change, or none)."""
        checked = {seller: checked_limit(seller, limit) for seller, limit in limits.items()}
        with self._lock:
            self.per_second.update(checked)
        for seller, limit in checked.items():
            log.info(
                "the rate limit of %s is %d request(s) a second from now (changed over /control/settings)",
                seller,
                limit,
            )

    def _apply_due(self, now: float) -> None:
        """Apply the scheduled changes whose moment has passed (under the lock)."""
        while self._due and self.started + self._due[0].after <= now:
            change = self._due.popleft()
            self.per_second[change.seller] = change.per_second
            log.info(
                "the rate limit of %s is %d request(s) a second from now (scheduled: %s)",
                change.seller,
                change.per_second,
                change,
            )

    def named_wait(self, seller: str, seconds: float, now: float | None = None) -> None:
        """A 429 told ``seller`` to wait ``seconds``: its requests until then are refused."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._waiting_until[seller] = max(self._waiting_until.get(seller, 0.0), now + seconds)

    def count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def status(self, now: float | None = None) -> dict:
        """The limits now, the scheduled changes still to come (as written) and the counters."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._apply_due(now)
            return {
                "rate_limits": dict(self.per_second),
                "limit_changes": [str(change) for change in self._due],
                "counters": dict(self.counters),
            }
