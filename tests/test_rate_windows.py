"""A lane's budget of several windows (100 per 10 s and 250,000 a day), and takes of several units at once.

Whatever the takes -- their times, their units, how many sessions race for the lane -- no declared window of
length ``per`` ever holds more than ``requests + burst`` units. The guarantee is checked on the reference
arithmetic over random schedules (a property test), on the statement against it take by take, and on the
statement raced by sessions of their own.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synclane_provider.core import (
    DeclarationError,
    Job,
    Operations,
    Owner,
    Page,
    Queue,
    Rate,
    SyncLane,
    UnknownOwnerError,
    WorkerPool,
)
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.ratelimit import Limits, limits, most_units, reserve_all
from synclane_provider.core.run.lane_gate import LaneGate
from tests.support.budget_race import max_in_any_window
from tests.support.helpers import Background, declare, owners, products

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
SECOND = timedelta(seconds=1)


def most_in_any_window(sends: Sequence[tuple[datetime, int]], per: timedelta) -> int:
    """The most units sent within any half-open period of length ``per`` (it suffices to start one at each send)."""
    ordered = sorted(sends)
    return max(sum(u for t, u in ordered if start <= t < start + per) for start, _ in ordered)


def assert_no_window_exceeded(rates: Limits, sends: Sequence[tuple[datetime, int]]) -> None:
    for rate in rates:
        assert most_in_any_window(sends, rate.per) <= rate.requests + rate.burst, (rate, sorted(sends))


# --- declared ------------------------------------------------------------------------------------------------------


def test_a_lane_may_declare_several_windows_kept_shortest_first():
    daily, burst = Rate(250_000, per=timedelta(days=1)), Rate(100, per=timedelta(seconds=10))
    queue = Queue("shops", owners=owners(), types=[products()], rate=[daily, burst])
    assert queue.rate == (burst, daily)
    assert limits(queue.rate) == (burst, daily) and limits(Rate(5)) == (Rate(5),) and limits(None) == ()
    assert Owner("acme", rate=(burst, daily)) == Owner("acme", rate=[daily, burst])  # the same budget


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ([], r"rate of queue 'shops' must be a Rate or a list of Rates .* got \[\]"),
        ([Rate(5), 10], r"rate of queue 'shops' must be a Rate or a list of Rates .* got 10 in it"),
        ("10/s", r"rate of queue 'shops' must be a Rate or a list of Rates .* got '10/s'"),
        ([Rate(5), Rate(8)], r"rate of queue 'shops' declares two rates per 1 s: one rate per window length"),
    ],
)
def test_a_bad_list_of_rates_is_refused_naming_the_value(rate, message):
    with pytest.raises(DeclarationError, match=message):
        Queue("shops", owners=owners(), types=[products()], rate=rate)


# --- the arithmetic -----------------------------------------------------------------------------------------------

windows = st.lists(
    st.builds(
        lambda per_ms, requests, burst, headroom, share: Rate(
            requests, per=timedelta(milliseconds=per_ms * requests), burst=burst, headroom=headroom, share=share
        ),
        per_ms=st.integers(10, 400),
        requests=st.integers(1, 12),
        burst=st.integers(0, 4),
        headroom=st.sampled_from([0, 0.05, 0.2]),
        share=st.sampled_from([1.0, 0.8, 0.5]),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda rate: rate.per,
).map(limits)


@settings(max_examples=300, deadline=None)
@given(
    rates=windows,
    schedule=st.lists(st.tuples(st.integers(0, 800), st.integers(1, 1_000), st.booleans()), max_size=60),
)
def test_property_no_window_is_exceeded_whatever_the_takes(rates, schedule):
    """Takes at random instants (several at one instant: sessions racing), each of random units up to what the
    tightest window allows at once, by the workers (at their share of the rate) or by the app's own calls (at
    the whole rate); each sends when its wait says. Every window keeps to requests + burst."""
    tats: list[datetime | None] = [None] * len(rates)
    now, sends = T0, []
    for gap_ms, units_seed, by_the_app in schedule:
        now += timedelta(milliseconds=gap_ms)
        units = 1 + units_seed % most_units(rates)
        taking = tuple(rate.whole for rate in rates) if by_the_app else rates
        tats, wait = reserve_all(taking, tats, now, units=units)
        sends.append((now + wait, units))
    if sends:
        assert_no_window_exceeded(rates, sends)


def test_without_room_for_the_units_after_the_first_a_window_would_be_exceeded():
    """What the property stands on: a take of three units right after one unit must wait until there is room for
    the third. Reckoned from the first unit's turn alone it goes at 0.1 s, and 11 units land in the first second."""
    rate = Rate(10, headroom=0)
    tats, _ = reserve_all((rate,), [None], T0)
    assert reserve_all((rate,), tats, T0, units=3)[1] == timedelta(milliseconds=300)
    naive = [(T0, 1), (T0 + timedelta(milliseconds=100), 10)]  # the first unit's turn only, ten units
    assert most_in_any_window(naive, SECOND) == 11


# --- the statement --------------------------------------------------------------------------------------------------


def take(store: Store, rates: Limits, now: datetime, units: int = 1) -> float:
    return store.take_lane_budget(
        "shops",
        "acme",
        cost=[rate.interval * units for rate in rates],
        tolerance=[rate.tolerance for rate in rates],
        interval=[rate.interval for rate in rates],
        now=now,
    )


def test_the_statement_takes_as_the_reference_arithmetic_says_in_every_window(lane_store, clock):
    """Two windows, takes of one to three units, a throttle in the middle: each wait is what reserve_all computes."""
    rates = limits([Rate(10, headroom=0, burst=2), Rate(12, per=timedelta(seconds=3), headroom=0)])
    rng = random.Random(7)
    tats: list[datetime | None] = [None, None]
    throttled_until, got, expected = None, [], []
    for step in range(30):
        if step == 12:
            throttled_until = lane_store.throttle_lane("shops", "acme", wait=timedelta(seconds=2), now=clock())
        units = rng.randint(1, 3)
        got.append(take(lane_store, rates, clock(), units))
        tats, wait = reserve_all(rates, tats, clock(), units=units, throttled_until=throttled_until)
        expected.append(wait.total_seconds())
        clock.advance(timedelta(milliseconds=rng.choice([0, 50, 400])))
    assert got == pytest.approx(expected)


def test_sessions_racing_for_a_lane_of_two_windows_never_exceed_either(database_url, schema):
    """Four sessions take from one lane as fast as they can, units of one to four, each with its own clock
    reading: what they were told to send never puts more than a window allows in it."""
    rates = limits([Rate(20, per=SECOND, burst=3), Rate(30, per=timedelta(seconds=4))])
    synclane = declare(schema, products())
    sends: list[tuple[datetime, int]] = []
    lock = threading.Lock()

    def session(seed: int) -> None:
        rng, store = random.Random(seed), Store(Session(synclane.database(database_url)))
        try:
            for _ in range(40):
                units = rng.randint(1, 4)
                now = datetime.now(timezone.utc)
                wait = take(store, rates, now, units)
                with lock:
                    sends.append((now + timedelta(seconds=wait), units))
        finally:
            store.session.close()

    racers = [Background(lambda seed=seed: session(seed), name=f"session {seed}") for seed in range(4)]
    for racer in racers:
        racer.result()
    assert len(sends) == 160
    assert_no_window_exceeded(rates, sends)


def test_a_spend_of_more_than_the_tightest_window_allows_at_once_is_refused_naming_it(database_url, schema):
    synclane = declare(schema, products(), rate=[Rate(5, burst=1), Rate(100, per=timedelta(minutes=1))])
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        job = ops.enqueue("shops", "acme", "products")
    store = Store(Session(database))
    try:
        gate = LaneGate(
            store, synclane.queue("shops"), clock=lambda: None, stop=threading.Event(), refresh=timedelta(minutes=1)
        )
        with pytest.raises(ValueError, match=r"spend\(7\) asks for more than lane acme .* at most 6 at once"):
            gate.spend(job, 7)
        assert gate.spend(job, 6) == timedelta(0)  # as many as the tightest window allows, at once
    finally:
        store.session.close()


def paced_lane(schema: str, rate: object, *, pages: int, started: list[float]) -> SyncLane:
    """Lane acme of two owners, whose budget is ``rate``, three slots' worth; each job has ``pages`` pages and
    notes in ``started`` when each began."""
    lock = threading.Lock()

    def page(job: Job) -> Page:
        with lock:
            started.append(time.monotonic())
        following = int(job.cursor or 0) + 1
        return Page(str(following) if following < pages else None, 1)

    return declare(
        schema,
        products(page),
        owner_source=lambda queue: [Owner("acme-us", lane="acme"), Owner("acme-eu", lane="acme")],
        rate=rate,
        concurrency=3,
    )


def pages_started(database_url: str, schema: str, rate: object, *, pages: int = 3) -> list[float]:
    """When each page started, run by three slots: two jobs of ``pages`` pages for each of two owners of lane
    acme, whose budget is ``rate``."""
    started: list[float] = []
    synclane = paced_lane(schema, rate, pages=pages, started=started)
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in ("acme-us", "acme-eu"):
            for n in range(2):
                ops.enqueue("shops", owner, "products", key=f"run-{n}")
    WorkerPool(synclane, database, "shops", slots=3).drain()
    return sorted(started)


def test_workers_keep_to_every_window_of_their_lane(database_url, schema):
    """A lane of 10 a second and 6 per 2 seconds, three slots on two owners of it: the pages start at the longer
    window's pace, and neither window ever holds more than it allows."""
    started = pages_started(database_url, schema, [Rate(10), Rate(6, per=timedelta(seconds=2))])
    assert len(started) == 12
    assert max_in_any_window(started, 2.0) <= 6 and max_in_any_window(started, 1.0) <= 10
    assert started[-1] - started[0] >= 3.0  # 12 pages at 6 per 2 s (the first 6 at once would be a burst)


# --- room for the app ----------------------------------------------------------------------------------------------


def test_a_share_paces_the_workers_below_the_rate_and_is_checked_when_declared():
    assert Rate(10, headroom=0, share=0.5).interval == timedelta(milliseconds=200)
    assert Rate(10, headroom=0, share=0.5).whole == Rate(10, headroom=0)
    assert Rate(10, share=0.8, burst=2).describe() == "10/1 s (burst 2, share 0.8)"
    for share in (0, 1.5, True, "half"):
        with pytest.raises(
            DeclarationError, match=f"Rate share must be a fraction above 0 and at most 1, got {share!r}"
        ):
            Rate(10, share=share)


def test_workers_keep_to_their_share_of_the_rate_leaving_the_rest_to_the_app(database_url, schema):
    """10 a second with a share of a half: twelve pages on three slots never start more than 5 in a second."""
    started = pages_started(database_url, schema, Rate(10, share=0.5))
    assert len(started) == 12
    assert max_in_any_window(started, 1.0) <= 5, started


def test_the_apps_own_calls_and_the_workers_together_keep_to_the_lanes_rate(database_url, schema):
    """Lane acme allows 10 a second; the workers keep to half of it. While three slots run 12 pages, the app makes
    its own calls through Operations.consume as fast as it is let: together they never put more than 10 in a
    second, and the app is not starved by the workers."""
    started: list[float] = []
    synclane = paced_lane(schema, Rate(10, share=0.5), pages=6, started=started)
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for owner in ("acme-us", "acme-eu"):
            ops.enqueue("shops", owner, "products", key="run")
        workers = Background(WorkerPool(synclane, database, "shops", slots=3).drain, name="workers")
        app: list[float] = []
        while len(app) < 12:
            ops.consume("shops", "acme")
            app.append(time.monotonic())
        workers.result()
    assert len(started) == 12
    assert max_in_any_window(started + app, 1.0) <= 10, sorted(started + app)


def test_consume_refuses_what_it_cannot_take_naming_it(database_url, schema):
    synclane = declare(schema, products(), rate=[Rate(5, burst=1), Rate(100, per=timedelta(minutes=1))])
    with Operations(synclane, synclane.database(database_url)) as ops:
        with pytest.raises(UnknownOwnerError, match="no owner the source of queue 'shops' lists is in lane 'nobody'"):
            ops.consume("shops", "nobody")
        with pytest.raises(ValueError, match=r"consume\(7\) asks for more than lane acme .* at most 6 at once"):
            ops.consume("shops", "acme", 7)
        with pytest.raises(ValueError, match="consume\\(\\) takes a positive number of units, got 0"):
            ops.consume("shops", "acme", 0)
        assert ops.consume("shops", "acme", 6) == timedelta(0)  # an idle lane: at once
    with Operations(declare(schema, products()), synclane.database(database_url)) as ops:
        assert ops.consume("shops", "acme", 1_000) == timedelta(0)  # no rate, nothing to wait for
