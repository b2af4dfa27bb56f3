"""A lane's rate budget: how many requests its API account allows per period, and the arithmetic that keeps to it.

The budget is kept in the database (``<schema>.lane_budgets``, one row per lane) so that every worker on every
machine draws on the same one. It is a GCRA (generic cell rate algorithm, the leaky bucket as a meter): the row
holds the lane's *theoretical arrival time* ``tat``, the instant by which every unit taken so far will have
been paid for at the declared rate. Taking ``n`` units is one statement that moves ``tat`` forward by ``n``
emission intervals and returns how long the taker must wait before it may send; workers reserve their turn
instead of retrying, so the waits queue up in order and nobody polls.

:func:`reserve` is the same arithmetic in Python, for the docs and the tests; the statement
``take_lane_budget`` in ``queries.sql`` is what runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.numbers import whole


@dataclass(frozen=True)
class Rate:
    """``requests`` per ``per``, plus ``burst`` requests more that a lane idle for a while may send at once.

    Over any period of length ``per`` a lane sends at most ``requests + burst`` requests; kept busy it sends
    evenly spaced requests, one every :attr:`interval`. Declared on a queue (``Queue(rate=…)``, every lane of
    the queue) or on an owner (``Owner(…, rate=…)``, its lane).

    ``headroom`` (default 5 %) paces the lane that much below the rate. Requests reach the API a little
    later than the instant they were allowed, by a varying few milliseconds (the database's answer, the
    thread waking up, the connection), and by far more on a busy machine; paced at exactly the rate, a
    request delayed more than the one ``requests`` later than it would land both in one of the API's
    windows, one too many. The headroom is what a request may be late (:attr:`lateness`: ``per x headroom /
    (1 - headroom)``, 53 ms a second); a page that would start later than its share of it gives its turn up and takes the
    next one, so a delayed page is never sent close behind the one before it. 0 paces at exactly the rate,
    and then a page goes however late it starts.

    >>> Rate(10, per=timedelta(seconds=1), burst=5, headroom=0).interval
    datetime.timedelta(microseconds=100000)
    >>> Rate(10).interval
    datetime.timedelta(microseconds=105263)
    """

    requests: int
    per: timedelta = timedelta(seconds=1)
    burst: int = 0
    headroom: float = 0.05

    def __post_init__(self) -> None:
        if not whole(self.requests, 1):
            raise DeclarationError(f"Rate requests must be a positive integer, got {self.requests!r}")
        if not isinstance(self.per, timedelta):
            raise DeclarationError(f"Rate per must be a timedelta, got {self.per!r}")
        if self.per <= timedelta(0):
            raise DeclarationError(f"Rate per must be positive, got {duration_text(self.per)}")
        if not whole(self.burst, 0):
            raise DeclarationError(f"Rate burst must be an integer of zero or more, got {self.burst!r}")
        if isinstance(self.headroom, bool) or not isinstance(self.headroom, (int, float)) or not 0 <= self.headroom < 1:
            raise DeclarationError(
                f"Rate headroom must be a fraction from 0 up to (not including) 1, got {self.headroom!r}"
            )
        if self.interval < timedelta(microseconds=1):
            raise DeclarationError(
                f"Rate of {self.requests} per {duration_text(self.per)} is finer than a microsecond a request, "
                f"which the database's clock cannot keep"
            )

    @property
    def interval(self) -> timedelta:
        """The emission interval: the time one request costs on the lane's clock (``per / requests``, plus headroom)."""
        return self.per / (self.requests * (1 - self.headroom))

    @property
    def lateness(self) -> timedelta:
        """How late after its turn a request may reach the API and the lane still keep to ``requests + burst``
        in any period: what the headroom adds to a period's worth of turns (``requests x interval - per``; zero
        without headroom). A page that would start later than half of it gives its turn up and takes a new one
        (the other half is for the handler's way to the API).

        >>> Rate(2).lateness
        datetime.timedelta(microseconds=52632)
        """
        return self.interval * self.requests - self.per

    @property
    def tolerance(self) -> timedelta:
        """How far ahead of the rate the lane may run: ``burst`` intervals."""
        return self.interval * self.burst

    def describe(self) -> str:
        text = f"{self.requests}/{duration_text(self.per)}"
        return f"{text} (burst {self.burst})" if self.burst else text


def reserve(
    rate: Rate, tat: datetime | None, now: datetime, *, units: int = 1, throttled_until: datetime | None = None
) -> tuple[datetime, timedelta]:
    """Take ``units`` of a lane's budget at ``now``: the lane's new theoretical arrival time and the wait.

    The turn starts where the last reservation left the lane (``tat``), or now if the lane has been idle, or
    when a throttle ends; the taker may go ``tolerance`` before that start, and never before the
    throttle ends.

    >>> from datetime import timezone
    >>> rate, t0 = Rate(5, headroom=0), datetime(2026, 12, 1, tzinfo=timezone.utc)
    >>> tat, wait = reserve(rate, None, t0)
    >>> wait, tat - t0
    (datetime.timedelta(0), datetime.timedelta(microseconds=200000))
    >>> reserve(rate, tat, t0)[1]  # a second request at the same instant waits one interval
    datetime.timedelta(microseconds=200000)
    >>> reserve(Rate(5, burst=1, headroom=0), tat, t0)[1]  # unless the burst allows it
    datetime.timedelta(0)
    """
    cost = rate.interval * units
    start = max(t for t in (tat, now, throttled_until) if t is not None)
    allowed = max(t for t in (start - rate.tolerance, now, throttled_until) if t is not None)
    return start + cost, allowed - now
