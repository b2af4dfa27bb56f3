"""The retry policy: where a failed, throttled or lost attempt leaves its job, and how long it waits. No database."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta

import pytest

from synclane_provider.core import DeclarationError, JobAbandoned, JobStatus, JobThrottled, Queue, WorkerLost
from synclane_provider.core.declare.retry import Jitter, RetryPolicy
from tests.support.helpers import owners, products

MINUTE = timedelta(minutes=1)
EXACT = RetryPolicy(max_attempts=5, retry_max_delay=5 * MINUTE, jitter=Jitter.NONE)


def test_failures_wait_a_doubling_capped_delay_then_defer_then_abandon():
    seen = [
        (EXACT.after_failure(n, RuntimeError("503")).status, EXACT.after_failure(n, RuntimeError("503")).delay)
        for n in range(1, 7)
    ]
    assert seen == [
        (JobStatus.FAILED, MINUTE),
        (JobStatus.FAILED, 2 * MINUTE),
        (JobStatus.FAILED, 4 * MINUTE),
        (JobStatus.FAILED, 5 * MINUTE),  # capped
        (JobStatus.DEFERRED, 5 * MINUTE),  # the attempts are used up: it steps aside
        (JobStatus.ABANDONED, timedelta(0)),  # its last attempt failed too
    ]


def test_a_lost_worker_is_a_failure_like_any_other():
    assert EXACT.after_failure(5, WorkerLost("worker w stopped renewing its lease")).status is JobStatus.DEFERRED
    assert EXACT.after_failure(6, WorkerLost("worker w stopped renewing its lease")).status is JobStatus.ABANDONED


def test_an_abandon_abandons_at_once():
    assert EXACT.after_failure(1, JobAbandoned("access revoked")) == EXACT.after_failure(9, JobAbandoned("gone"))
    assert EXACT.after_failure(1, JobAbandoned("access revoked")).status is JobStatus.ABANDONED


def test_a_throttle_waits_the_named_wait_exactly_or_its_own_doubling_delay_and_never_abandons():
    jittered = RetryPolicy(seed=1)
    assert jittered.after_failure(1, JobThrottled("429", retry_after=17)).delay == timedelta(seconds=17)
    delays = [EXACT.after_failure(n, JobThrottled("429")).delay for n in range(1, 5)]
    assert delays == [5 * MINUTE, 10 * MINUTE, 20 * MINUTE, 30 * MINUTE]
    assert EXACT.after_failure(12, JobThrottled("429")).status is JobStatus.DEFERRED


def test_full_jitter_is_the_default_and_spreads_delays_over_the_whole_window():
    policy = RetryPolicy(retry_delay=timedelta(seconds=100), seed=20261130)
    assert policy.jitter is Jitter.FULL
    delays = [policy.after_failure(1, RuntimeError("503")).delay.total_seconds() for _ in range(2000)]
    assert all(0 <= delay <= 100 for delay in delays)
    deciles = Counter(int(delay // 10) for delay in delays)
    assert all(150 <= deciles[d] <= 250 for d in range(10)), deciles  # about 200 in each tenth: no herd


def test_a_seed_gives_the_same_delays_every_time():
    first, again = RetryPolicy(seed=7), RetryPolicy(seed=7)
    assert [first.after_failure(3, RuntimeError()).delay for _ in range(5)] == [
        again.after_failure(3, RuntimeError()).delay for _ in range(5)
    ]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be a positive integer, got 0"),
        ({"retry_delay": 60}, "retry_delay must be a timedelta, got 60"),
        ({"throttle_delay": -MINUTE}, "throttle_delay must be positive, got -1 min"),
        (
            {"retry_delay": 2 * MINUTE, "retry_max_delay": MINUTE},
            "retry_max_delay (1 min) is shorter than retry_delay (2 min)",
        ),
        ({"jitter": "some"}, "jitter must be 'full' or 'none', got 'some'"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_setting(settings, message):
    with pytest.raises(DeclarationError) as caught:
        RetryPolicy(**settings)
    assert message in str(caught.value)


def test_a_queue_takes_a_policy_whole_or_its_settings_one_by_one():
    whole = Queue("shops", owners=owners(), types=[products()], retry=RetryPolicy(max_attempts=3, jitter="none"))
    assert (whole.max_attempts, whole.retry.jitter) == (3, Jitter.NONE)
    one_by_one = Queue("shops", owners=owners(), types=[products()], max_attempts=3, retry_delay=timedelta(seconds=10))
    assert one_by_one.retry == RetryPolicy(max_attempts=3, retry_delay=timedelta(seconds=10))
    assert (one_by_one.retry_delay, one_by_one.retry_max_delay, one_by_one.retry.jitter) == (
        timedelta(seconds=10),
        timedelta(hours=1),
        Jitter.FULL,
    )
    with pytest.raises(DeclarationError, match="queue 'shops' takes retry= or the settings max_attempts, not both"):
        Queue("shops", owners=owners(), types=[products()], retry=RetryPolicy(), max_attempts=3)
    assert dataclasses.replace(whole, concurrency=2).retry is whole.retry  # a copy keeps its policy
