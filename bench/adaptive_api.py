"""The adaptive-rate benchmark's API: a limit the client does not know, counted in fixed windows and cut mid-run,
which only its ``X-RateLimit-*`` headers tell; and what its log says of a run.

The limit (:class:`Schedule`) is ``limit`` requests per fixed window of ``window`` seconds, counted from the API's
origin, cut to ``cut_limit`` from ``cut_from`` to ``cut_to``. The cut neither starts nor ends on a window
boundary, so it changes windows already under way, as a provider lowering a plan's limit does. A change applies
at once: what remains of the window is the limit now in force less the requests served in it so far, never
below 0. A request beyond it is refused with 429 and ``Retry-After`` (whole seconds to the window's end); every
answer carries ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` (after this request) and ``X-RateLimit-Reset``
(whole seconds to the window's end). Refused requests use none of the window.

Served over HTTP by :class:`tests.support.budget_race.Served`, whose arrival times are when each connection was
accepted: a busy machine delays the request's thread, not the instant the API counts it at.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field

RECOVERED = 0.9
"""The share of the normal limit's rate the served rate must be back to for the run to count as recovered."""


@dataclass(frozen=True)
class Schedule:
    """The API's limit over time: ``limit`` per ``window`` seconds, ``cut_limit`` from ``cut_from`` to ``cut_to``."""

    window: float = 60.0
    limit: int = 600
    cut_limit: int = 300
    cut_from: float = 45.0
    cut_to: float = 105.0

    @classmethod
    def scaled(cls, window: float) -> Schedule:
        """The default schedule (10 a second, halved for one window from three quarters into the first) with
        windows of ``window`` seconds.

        >>> Schedule.scaled(4)
        Schedule(window=4, limit=40, cut_limit=20, cut_from=3.0, cut_to=7.0)
        """
        return cls(window, round(10 * window), round(5 * window), 0.75 * window, 1.75 * window)

    @property
    def per_s(self) -> float:
        """The normal limit as a rate."""
        return self.limit / self.window

    @property
    def recovery_span(self) -> float:
        """The sliding span over which the served rate is measured for recovery: 5 s of 60 s windows."""
        return self.window / 12

    def limit_at(self, t: float) -> int:
        """The limit in force ``t`` seconds after the origin.

        >>> Schedule().limit_at(44.9), Schedule().limit_at(45), Schedule().limit_at(105)
        (600, 300, 600)
        """
        return self.cut_limit if self.cut_from <= t < self.cut_to else self.limit

    def window_of(self, t: float) -> int:
        """The number of the window ``t`` falls in (a request a moment before the origin counts in the first)."""
        return math.floor(max(t, 0.0) / self.window)

    def reset_after(self, t: float) -> int:
        """Whole seconds from ``t`` to its window's end, rounded up (a client waiting them is never early).

        >>> Schedule().reset_after(45.2), Schedule().reset_after(59.99)
        (15, 1)
        """
        return math.ceil((self.window_of(t) + 1) * self.window - t)

    def allowed(self, end: float) -> float:
        """Requests the API allows from its origin to ``end``: the limit in force, prorated over the time it is in
        force (a window cut for a quarter of it allows three quarters of ``limit`` and a quarter of ``cut_limit``).

        >>> Schedule().allowed(60), Schedule().allowed(165)
        (525.0, 1350.0)
        """
        cut = max(min(end, self.cut_to) - self.cut_from, 0.0)
        return (self.limit * end - (self.limit - self.cut_limit) * cut) / self.window


@dataclass
class WindowedAPI:
    """Answers the requests of ``accounts`` (the lane's owners) under ``schedule``, logging each; the requests of
    any other account (the workers' warm-up) are answered 200 and neither counted nor logged.

    Its clock starts at :meth:`start` (the monotonic instant the jobs fall due), not when it is created, so that
    every variant of the benchmark meets the same windows from its first request on."""

    schedule: Schedule
    accounts: tuple[str, ...]
    latency: float = 0.0
    """Seconds each answer takes (after its arrival is counted)."""
    log: list[tuple[float, int]] = field(default_factory=list)
    """(seconds after the origin, status) per counted request, in the order they were answered."""
    origin: float = math.inf
    _served: dict[int, int] = field(default_factory=dict)
    """Requests served per window number."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, origin: float) -> None:
        """Count windows from the monotonic instant ``origin``."""
        self.origin = origin

    def respond(self, account: str, arrived: float | None) -> tuple[int, dict[str, str]]:
        """The status and headers of a request that arrived at the monotonic instant ``arrived``."""
        if account not in self.accounts:
            return 200, {}
        with self._lock:
            t = (time.monotonic() if arrived is None else arrived) - self.origin
            window, limit = self.schedule.window_of(t), self.schedule.limit_at(t)
            served = self._served.get(window, 0)
            status = 200 if served < limit else 429
            if status == 200:
                served = self._served[window] = served + 1
            self.log.append((t, status))
        reset = str(self.schedule.reset_after(t))
        headers = {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(max(limit - served, 0)),
            "X-RateLimit-Reset": reset,
        }
        return status, {**headers, "Retry-After": reset} if status == 429 else headers


@dataclass(frozen=True)
class Figures:
    """What the API's log says of a run of ``seconds`` from its origin (requests after it are not counted)."""

    served: int
    refused: int
    quota_used: float
    """Requests served over those the API allowed (:meth:`Schedule.allowed`)."""
    refused_share: float
    """Requests refused over all requests."""
    recovery_s: float
    """Seconds from the cut's end until the served rate is back (:func:`recovery`); infinite if it never was."""

    @classmethod
    def of(cls, log: list[tuple[float, int]], schedule: Schedule, seconds: float) -> Figures:
        counted = [(t, status) for t, status in log if t < seconds]
        served = sorted(t for t, status in counted if status == 200)
        refused = len(counted) - len(served)
        return cls(
            len(served),
            refused,
            len(served) / schedule.allowed(seconds),
            refused / len(counted) if counted else 0.0,
            recovery(served, schedule),
        )

    def line(self, variant: str) -> str:
        return (
            f"variant={variant} quota_used={self.quota_used:.3f} refused_share={self.refused_share:.4f} "
            f"recovery_s={self.recovery_s:.1f} served={self.served} refused={self.refused}"
        )


def recovery(served: list[float], schedule: Schedule) -> float:
    """Seconds from the end of the cut to the first served request after it at which the requests served over the
    last :attr:`~Schedule.recovery_span` seconds come to :data:`RECOVERED` of the normal limit's rate; infinite
    when they never do. ``served``: the served requests' times, in order.

    >>> paced = [i / 10 for i in range(1, 1651)]  # 10 a second throughout
    >>> recovery(paced, Schedule())
    0.0
    >>> recovery([t for t in paced if t < 105 or t >= 112], Schedule())  # none from 105 s; 45 in 5 s at 116.4 s
    11.4
    >>> recovery([t for t in paced if t < 105], Schedule())
    inf
    """
    needed = math.ceil(RECOVERED * schedule.per_s * schedule.recovery_span - 1e-9)
    for last in range(bisect_right(served, schedule.cut_to - 1e-9), len(served)):
        t = served[last]
        first = bisect_right(served, t - schedule.recovery_span)
        if last - first + 1 >= needed:
            return round(t - schedule.cut_to, 6)
    return math.inf
