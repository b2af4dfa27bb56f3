"""What a lane learns from its API's answers, and quotas waited out without a worker.

A handler hands each answer to ``job.observe``: what is left until the reset paces the lane for every worker
(never faster than a declared rate); nothing left holds the lane until the reset, and a reset further away
than the queue's ``longest_wait`` hands the lane's jobs back at their cursors, due then, counting no attempt and
nothing against their owner. A lane whose answers say nothing halves its rate at each 429 and grows it back to
the declared one (AIMD). Each request is spaced from when the one before it really left.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from psycopg import sql

from synclane_provider.core import JobThrottled, Operations, Page, Rate, WorkerSlot
from synclane_provider.core.db.store import LaneTake, Store
from synclane_provider.core.declare.ratelimit import limits, regrowth
from synclane_provider.core.metrics import LANE_LEARNT_RATE
from synclane_provider.core.ops.monitor import Monitor
from synclane_provider.core.run.results import Outcome
from tests.support.helpers import declare, products, rows
from tests.test_metrics import RecordingMetrics

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
SECOND = timedelta(seconds=1)
QUEUE, LANE = "shops", "acme"


def take(store: Store, now: datetime, *rates: Rate, late: float = 0.0, longest: timedelta | None = None) -> float:
    """One page's take in lane acme at ``now``: its declared ``rates`` (none: only what the lane learnt)."""
    declared = limits(list(rates))
    return store.take_turn(
        QUEUE,
        LANE,
        LaneTake(
            cost=[rate.interval for rate in declared],
            tolerance=[rate.tolerance for rate in declared],
            late=timedelta(seconds=late),
            longest=longest,
            regrowth=regrowth(declared),
        ),
        now=now,
    ).wait


def budget(admin, schema: str) -> dict:
    [row] = admin.execute(
        sql.SQL("SELECT * FROM {}.lane_budgets WHERE lane = %s").format(sql.Identifier(schema)), [LANE]
    ).fetchall()
    return row


# --- the lane's budget, statement by statement (a pinned clock) ----------------------------------------------------


def test_what_headers_leave_until_the_reset_paces_a_lane_that_declares_no_rate(lane_store):
    lane_store.learn_lane(QUEUE, LANE, pace=timedelta(seconds=0.25), hold=None, quota=False, now=T0)
    assert [take(lane_store, T0) for _ in range(3)] == [0.0, 0.25, 0.5]
    turn = lane_store.take_turn(QUEUE, LANE, LaneTake(), now=T0)
    assert (turn.wait, turn.paced) == (0.75, True)


def test_a_lane_that_learnt_nothing_and_declares_nothing_is_never_held_by_a_take(lane_store):
    assert [take(lane_store, T0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert lane_store.take_turn(QUEUE, LANE, LaneTake(), now=T0).paced is False


def test_a_learnt_pace_is_never_faster_than_the_declared_rate(lane_store):
    declared = Rate(2, headroom=0)
    lane_store.learn_lane(QUEUE, LANE, pace=timedelta(seconds=0.1), hold=None, quota=False, now=T0)
    assert [take(lane_store, T0, declared) for _ in range(3)] == [0.0, 0.5, 1.0]


def test_a_refusal_halves_the_rate_and_it_grows_back_to_the_declared_one(lane_store):
    """Rate(10) cut by a 429 to 5 a second, growing by a tenth of 10 a second every second: 7.5 a second 2.5 s
    later, the declared 10 a second after 5 s."""
    declared = Rate(10, headroom=0)
    assert lane_store.cut_lane_pace(QUEUE, LANE, unit=declared.interval, regrowth=1.0, now=T0) == 2 * declared.interval
    assert [take(lane_store, T0, declared) for _ in range(2)] == [0.0, 0.2]
    later = T0 + timedelta(seconds=30)  # idle meanwhile: the next take goes at once
    cut_again = lane_store.cut_lane_pace(QUEUE, LANE, unit=declared.interval, regrowth=1.0, now=later)
    assert cut_again == 2 * declared.interval  # from the declared rate it had grown back to, halved again
    assert [take(lane_store, later, declared) for _ in range(2)] == [0.0, 0.2]
    assert take(lane_store, later + timedelta(seconds=2.5), declared) == pytest.approx(0, abs=1e-6)
    assert take(lane_store, later + timedelta(seconds=2.5), declared) == pytest.approx(1 / 7.5, abs=1e-6)
    assert take(lane_store, later + timedelta(seconds=10), declared) == 0.0
    assert take(lane_store, later + timedelta(seconds=10), declared) == pytest.approx(0.1)


def test_a_refusal_leaves_a_lane_to_its_headers_for_a_minute(lane_store):
    lane_store.learn_lane(QUEUE, LANE, pace=timedelta(seconds=0.3), hold=None, quota=False, now=T0)
    assert lane_store.cut_lane_pace(QUEUE, LANE, unit=timedelta(seconds=0.1), regrowth=1.0, now=T0 + SECOND) is None
    assert [take(lane_store, T0 + SECOND) for _ in range(2)] == [0.0, pytest.approx(0.3)]
    an_hour_later = T0 + timedelta(hours=1)
    assert lane_store.cut_lane_pace(QUEUE, LANE, unit=timedelta(seconds=0.1), regrowth=1.0, now=an_hour_later)


def test_a_turn_further_away_than_the_longest_wait_is_not_taken_and_holds_the_lane_until_then(
    lane_store, admin, schema
):
    """An hourly quota of one used up: the next take would wait an hour. It takes nothing (the one after it waits
    the same hour, not two), and the lane is on quota until then."""
    hourly = Rate(1, per=timedelta(hours=1), headroom=0)
    assert take(lane_store, T0, hourly, longest=timedelta(minutes=1)) == 0.0
    tats = budget(admin, schema)["tats"]
    assert take(lane_store, T0, hourly, longest=timedelta(minutes=1)) == 3600.0
    assert take(lane_store, T0 + SECOND, hourly, longest=timedelta(minutes=1)) == 3599.0
    row = budget(admin, schema)
    assert (row["tats"], row["quota_until"]) == (tats, T0 + timedelta(hours=1))


def test_the_next_turn_is_spaced_from_when_the_last_request_really_left(lane_store):
    """Two a second: a request that left 0.1 s after its turn puts the next 0.6 s after that turn, not 0.5."""
    declared = Rate(2, headroom=0)
    assert take(lane_store, T0, declared) == 0.0
    assert take(lane_store, T0, declared, late=0.1) == pytest.approx(0.6)


# --- in a worker -----------------------------------------------------------------------------------------------------


class Answers:
    """A handler whose API answers each page with ``headers``, keeping when each page was sent; ``pages`` pages."""

    def __init__(self, headers: dict[str, str], pages: int = 3) -> None:
        self.headers, self.pages, self.sent = headers, pages, []

    def __call__(self, job) -> Page:
        self.sent.append(time.monotonic())
        job.observe(self.headers)
        done = int(job.cursor or 0) + 1
        return Page(str(done) if done < self.pages else None, 1)


def run_one(synclane, database_url, *jobs: str, metrics=None):
    database = synclane.database(database_url)
    with Operations(synclane, database) as ops:
        for key in jobs:
            ops.enqueue(QUEUE, "acme", "products", key=key)
    extra = {"metrics": metrics} if metrics is not None else {}
    with WorkerSlot(synclane, database, QUEUE, **extra) as slot:
        started = time.monotonic()
        result = slot.run_one(then_continue=False)
        return result, time.monotonic() - started


def test_headers_saying_nothing_is_left_hold_the_lane_until_the_reset(database_url, schema):
    answers = Answers({"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"}, pages=2)
    result, _ = run_one(declare(schema, products(answers)), database_url, "now")
    assert result.outcome is Outcome.COMPLETED
    assert answers.sent[1] - answers.sent[0] >= 0.95


def test_what_is_left_until_the_reset_spaces_the_pages_and_shows_as_the_lanes_learnt_rate(database_url, schema):
    """4 left for 1 s: a page every 0.2 s, a learnt rate of 5 a second on the Lanes view and in the metrics."""
    answers = Answers({"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "1"}, pages=4)
    synclane, metrics = declare(schema, products(answers)), RecordingMetrics()
    result, _ = run_one(synclane, database_url, "now", "later", metrics=metrics)
    assert result.outcome is Outcome.COMPLETED
    gaps = [b - a for a, b in zip(answers.sent, answers.sent[1:])]
    assert min(gaps[1:]) >= 0.19, gaps  # the first page was sent before anything was learnt
    assert ("gauge", LANE_LEARNT_RATE.name, {"queue": QUEUE, "lane": LANE}, 5.0) in metrics.calls
    with Operations(synclane, synclane.database(database_url)) as ops:
        [lane] = Monitor(ops).lanes(QUEUE).items  # the job "later" waits in it
    assert (lane.rate, lane.learnt_rate, lane.learnt_from) == ("none", pytest.approx(5.0), "headers")


def test_the_lanes_listing_gives_every_declared_window_of_a_lane(database_url, schema):
    synclane = declare(schema, products(), rate=[Rate(10), Rate(250_000, per=timedelta(days=1))])
    with Operations(synclane, synclane.database(database_url)) as ops:
        ops.enqueue(QUEUE, "acme", "products", key="now")
        [lane] = Monitor(ops).lanes(QUEUE).items
    assert (lane.rate, lane.learnt_rate) == ("10/1 s, 250000/1 day", None)


def test_a_quota_used_up_until_a_reset_far_away_hands_the_lanes_jobs_back_at_their_cursors(database_url, schema, admin):
    """The first page's answer says nothing is left for an hour: the job goes back at its cursor, due in an
    hour, its attempt not counted and nothing against its owner; the lane's other job waits the same hour; no
    worker waited for it."""
    answers = Answers({"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3600"})
    synclane = declare(schema, products(answers))
    result, took = run_one(synclane, database_url, "now", "later")
    assert (result.outcome, len(answers.sent), took < 10) == (Outcome.RELEASED, 1, True)
    jobs = rows(admin, schema)
    assert [(j["status"], j["cursor"], j["attempt_count"]) for j in jobs] == [("pending", "1", 0), ("pending", None, 0)]
    quota_until = budget(admin, schema)["quota_until"]
    assert all(j["next_run_at"] == quota_until for j in jobs)
    assert timedelta(minutes=59) < quota_until - jobs[0]["created_at"] <= timedelta(hours=1, minutes=1)
    assert admin.execute(sql.SQL("SELECT count(*) AS n FROM {}.owners WHERE consecutive_failures > 0").format(
        sql.Identifier(schema))).fetchone()["n"] == 0  # fmt: skip
    with Operations(synclane, synclane.database(database_url)) as ops:
        monitor = Monitor(ops)
        [lane] = monitor.lanes(QUEUE).items
        listing = monitor.jobs(QUEUE)
    assert lane.quota_until == quota_until
    assert set(listing.held.values()) == {f"lane on quota until {quota_until:%Y-%m-%d %H:%M:%S} UTC"}


def test_a_retry_after_of_hours_is_waited_out_as_a_quota(database_url, schema, admin):
    def refused(job):
        raise JobThrottled("daily quota used up", retry_after=timedelta(hours=2))

    result, took = run_one(declare(schema, products(refused)), database_url, "now")
    assert (result.outcome, took < 10) == (Outcome.RELEASED, True)
    [job] = rows(admin, schema)
    assert (job["status"], job["attempt_count"], job["next_run_at"]) == (
        "pending",
        0,
        budget(admin, schema)["quota_until"],
    )


def test_a_job_taken_in_a_lane_on_quota_sends_no_page_and_waits_for_the_reset(database_url, schema, admin, lane_store):
    """A job enqueued while its lane is on quota is taken (the take does not look at lanes' budgets), and handed
    back before its first page, due at the reset."""
    answers = Answers({})
    until = lane_store.learn_lane(QUEUE, LANE, pace=None, hold=timedelta(hours=1), quota=True, now=None)
    result, _ = run_one(declare(schema, products(answers)), database_url, "now")
    assert (result.outcome, answers.sent) == (Outcome.RELEASED, [])
    [job] = rows(admin, schema)
    assert (job["status"], job["attempt_count"], job["next_run_at"]) == ("pending", 0, until)


def test_a_refusal_without_headers_halves_a_declared_rate(database_url, schema, admin):
    def refused(job):
        raise JobThrottled("slow down")

    result, _ = run_one(declare(schema, products(refused), rate=Rate(10)), database_url, "now")
    assert result.outcome is Outcome.FAILED
    row = budget(admin, schema)
    assert (row["learnt_interval"], row["learnt_from"]) == (2 * Rate(10).interval, "refusals")


def test_a_faster_pace_learnt_brings_a_turn_reserved_at_the_slower_one_forward(lane_store):
    """The lane learnt 1 a second and reserved its next turn a second ahead; the next answer says 10 a second:
    the next request waits a tenth of a second, not the rest of that second."""
    lane_store.learn_lane(QUEUE, LANE, pace=SECOND, hold=None, quota=False, now=T0)
    assert [take(lane_store, T0) for _ in range(2)] == [0.0, 1.0]
    lane_store.learn_lane(QUEUE, LANE, pace=SECOND / 10, hold=None, quota=False, now=T0)
    assert take(lane_store, T0) == pytest.approx(0.1)


class Prepares:
    """A handler that does 0.3 s of work of its own before its first request (a token's refresh), none before the
    others; when it says so (``job.sent()``), right before sending."""

    def __init__(self, *, says: bool, pages: int = 3) -> None:
        self.says, self.pages, self.sent = says, pages, []

    def __call__(self, job) -> Page:
        if job.cursor is None:
            time.sleep(0.3)
        if self.says:
            job.sent()
        self.sent.append(time.monotonic())
        done = int(job.cursor or 0) + 1
        return Page(str(done) if done < self.pages else None, 1)


@pytest.mark.parametrize("says", [True, False])
def test_a_request_sent_late_in_its_page_spaces_the_next_from_when_it_really_left(database_url, schema, says):
    """Two a second: the first request, sent 0.3 s into its page, and the next still leave 0.5 s apart when the
    handler says when it sends; otherwise the lane reckons from the handler's start, and they leave 0.2 s apart."""
    handler = Prepares(says=says)
    result, _ = run_one(declare(schema, products(handler), rate=Rate(2, headroom=0)), database_url, "now")
    assert result.outcome is Outcome.COMPLETED
    gaps = [b - a for a, b in zip(handler.sent, handler.sent[1:])]
    assert (min(gaps) >= 0.49) is says, gaps


def test_a_response_that_knows_how_long_it_took_says_when_its_request_left(database_url, schema):
    """The first page works 0.3 s before its request, which takes 0.1 s; its answer's ``elapsed`` (requests',
    httpx's) says so: the next request goes 0.5 s after the first left, not 0.5 s after the handler was called."""

    class Answer:
        headers: dict[str, str] = {}
        elapsed = timedelta(seconds=0.1)

    sent: list[float] = []

    def handler(job) -> Page:
        if job.cursor is None:
            time.sleep(0.3)
        sent.append(time.monotonic())
        time.sleep(0.1)  # the request in flight
        job.observe(Answer())
        done = int(job.cursor or 0) + 1
        return Page(str(done) if done < 3 else None, 1)

    result, _ = run_one(declare(schema, products(handler), rate=Rate(2, headroom=0)), database_url, "now")
    assert result.outcome is Outcome.COMPLETED
    assert min(b - a for a, b in zip(sent, sent[1:])) >= 0.49
