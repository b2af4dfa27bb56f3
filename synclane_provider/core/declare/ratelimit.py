"""A lane's rate budget: how many requests its API account allows per period, and the arithmetic that keeps to it.

The budget is kept in the database (``<schema>.lane_budgets``, one row per lane) so that every worker on every
machine draws on the same one. It is a GCRA (generic cell rate algorithm, the leaky bucket as a meter): the row
holds the lane's *theoretical arrival time* ``tat``, the instant by which every unit taken so far will have
been paid for at the declared rate. Taking ``n`` units is one statement that moves ``tat`` forward by ``n``
emission intervals and returns how long the taker must wait before it may send; workers reserve their turn
instead of retrying, so the waits queue up in order and nobody polls.

APIs often set several limits at once (HubSpot: 100 requests per 10 seconds and 250,000 a day): a lane may
declare several rates, one per window length (:func:`limits`), and keeps a ``tat`` for each (``tats``, shortest
window first). A request is sent when *every* window allows it, and each window counts it from that instant,
so no window is ever exceeded and a long window's quota is never spent faster than its own rate allows.

:func:`reserve` is the same arithmetic in Python, for the docs and the tests; the statement
``take_lane_budget`` in ``queries.sql`` is what runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
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
    share: float = 1.0
    """The share of the rate the workers use (default all of it); the rest is left for the app's own calls to
    the same API, which take from the same budget with
    :meth:`Operations.consume <synclane_provider.core.ops.operations.Operations.consume>` at the whole rate, so
    that both together keep to it."""

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
        if isinstance(self.share, bool) or not isinstance(self.share, (int, float)) or not 0 < self.share <= 1:
            raise DeclarationError(f"Rate share must be a fraction above 0 and at most 1, got {self.share!r}")
        if self.interval < timedelta(microseconds=1):
            raise DeclarationError(
                f"Rate of {self.requests} per {duration_text(self.per)} is finer than a microsecond a request, "
                f"which the database's clock cannot keep"
            )

    @property
    def interval(self) -> timedelta:
        """The emission interval: the time one request costs on the lane's clock (``per / requests``, plus headroom,
        and stretched to the workers' :attr:`share`)."""
        return self.per / (self.requests * self.share * (1 - self.headroom))

    @property
    def lateness(self) -> timedelta:
        """How late after its turn a request may reach the API and the lane still keep to ``requests + burst``
        in any period: what the headroom adds to a period's worth of turns (``requests x interval - per``; zero
        without headroom). A page that would start later than half of it gives its turn up and takes a new one
        (the other half is for the handler's way to the API).

        The share left to the app is not room for lateness: the app's own calls may be using it.

        >>> Rate(2).lateness, Rate(2, share=0.5).lateness
        (datetime.timedelta(microseconds=52632), datetime.timedelta(microseconds=52632))
        """
        return self.whole.interval * self.requests - self.per

    @property
    def whole(self) -> Rate:
        """The rate without its share: what the app's own calls take at (see :attr:`share`)."""
        return replace(self, share=1.0)

    @property
    def tolerance(self) -> timedelta:
        """How far ahead of the rate the lane may run: ``burst`` intervals of the whole rate (a share paces the
        workers, it does not widen their burst beyond what the app's calls leave room for)."""
        return self.whole.interval * self.burst

    def describe(self) -> str:
        text = f"{self.requests}/{duration_text(self.per)}"
        extras = [f"burst {self.burst}"] * bool(self.burst) + [f"share {self.share:g}"] * (self.share < 1)
        return f"{text} ({', '.join(extras)})" if extras else text


Limits = tuple[Rate, ...]
"""The rates a lane keeps at once, shortest window first (one, usually; none: no budget)."""


def limits(rate: Rate | Sequence[Rate] | None) -> Limits:
    """The rates declared as ``rate=`` (one :class:`Rate`, several, or None), shortest window first.

    >>> limits(None), limits(Rate(5))
    ((), (Rate(requests=5, per=datetime.timedelta(seconds=1), burst=0, headroom=0.05, share=1.0),))
    >>> [r.describe() for r in limits([Rate(250_000, per=timedelta(days=1)), Rate(100, per=timedelta(seconds=10))])]
    ['100/10 s', '250000/1 day']
    """
    if rate is None:
        return ()
    if isinstance(rate, Rate):
        return (rate,)
    return tuple(sorted(rate, key=lambda r: r.per))


def checked_limits(where: str, rate: object) -> Rate | Limits | None:
    """``rate`` as a declaration may keep it (a Rate, a tuple of Rates, or None), or a DeclarationError naming the
    bad value: something else than Rates, none at all, or two rates of the same window length."""
    if rate is None or isinstance(rate, Rate):
        return rate
    example = "(e.g. Rate(10, per=timedelta(seconds=1)), or [Rate(100, per=timedelta(seconds=10)), Rate(250_000, per=timedelta(days=1))])"
    if isinstance(rate, (str, bytes)) or not isinstance(rate, Sequence) or not rate:
        raise DeclarationError(f"rate of {where} must be a Rate or a list of Rates {example}, got {rate!r}")
    for one in rate:
        if not isinstance(one, Rate):
            raise DeclarationError(f"rate of {where} must be a Rate or a list of Rates {example}, got {one!r} in it")
    pers = [one.per for one in rate]
    twice = sorted({per for per in pers if pers.count(per) > 1})
    if twice:
        raise DeclarationError(
            f"rate of {where} declares two rates per {duration_text(twice[0])}: one rate per window length"
        )
    return tuple(sorted(rate, key=lambda one: one.per))


def describe_limits(rates: Limits) -> str:
    """``100/10 s, 250000/1 day``; ``none`` for no budget."""
    return ", ".join(rate.describe() for rate in rates) or "none"


def lateness(rates: Limits) -> timedelta:
    """How late after its turn a request may reach the API and every window still keep to its rate: the least
    of the rates' :attr:`Rate.lateness`."""
    return min(rate.lateness for rate in rates)


def reserve_all(
    rates: Limits,
    tats: Sequence[datetime | None],
    now: datetime,
    *,
    units: int = 1,
    throttled_until: datetime | None = None,
) -> tuple[list[datetime], timedelta]:
    """Take ``units`` of a lane's budget of several windows at ``now``: each window's new theoretical arrival
    time and the wait, as ``take_lane_budget`` computes them.

    The requests go when every window allows them, and each window counts them from then: a window whose own
    turn came earlier still reserves from the instant they are sent, so the quiet time another window imposed is
    not lost to it. ``units`` requests sent at once need room for all of them: a window allows them once its turn
    less its burst has come for the last of them (``tat + (units - 1) x interval - tolerance``), which keeps
    every window of ``per`` at ``requests + burst`` however the units come (see :func:`most_units`).

    >>> from datetime import timezone
    >>> t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    >>> fast, slow = Rate(10, headroom=0), Rate(4, per=timedelta(seconds=2), headroom=0)
    >>> tats, waits = [None, None], []
    >>> for _ in range(4):
    ...     tats, wait = reserve_all((fast, slow), tats, t0)
    ...     waits.append(wait.total_seconds())
    >>> waits  # the slower window sets the pace: 4 per 2 s
    [0.0, 0.5, 1.0, 1.5]
    >>> [tats, wait] = reserve_all((fast,), [None], t0)
    >>> reserve_all((fast,), tats, t0, units=3)[1]  # three more at once: room for the third is 0.3 s away
    datetime.timedelta(microseconds=300000)
    """
    if len(tats) != len(rates):
        raise ValueError(f"{len(rates)} rates and {len(tats)} tats")
    sent = max(
        t
        for t in (
            now,
            throttled_until,
            *(tat + rate.interval * (units - 1) - rate.tolerance for rate, tat in zip(rates, tats) if tat is not None),
        )
        if t is not None
    )
    return [
        (max(tat, sent) if tat is not None else sent) + rate.interval * units for rate, tat in zip(rates, tats)
    ], sent - now


def regrowth(rates: Limits) -> float:
    """How fast a rate cut by refusals grows back, in requests a second per second: a tenth of the tightest
    declared window's rate each second (halved, it is whole again in five seconds); 0 without a declared rate."""
    return 1 / (10 * rates[0].interval.total_seconds()) if rates else 0.0


def most_units(rates: Limits) -> int:
    """The most units one take may ask for: what the tightest window allows in any period (``requests +
    burst``); more could never be sent at once without going over it."""
    return min(rate.requests + rate.burst for rate in rates)


def check_units(asked: str, units: int, rates: Limits, lane: str) -> None:
    """Refuse, naming the lane and its rates, a take of more units than its tightest window allows at once:
    ``asked`` is how the caller asked (``spend(7)``)."""
    if units > most_units(rates):
        raise ValueError(
            f"{asked} asks for more than lane {lane} may send in any period "
            f"({describe_limits(rates)}: at most {most_units(rates)} at once)"
        )


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
    [taken], wait = reserve_all((rate,), (tat,), now, units=units, throttled_until=throttled_until)
    return taken, wait
