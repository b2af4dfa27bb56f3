"""A queue's retry policy: what a failed, throttled or lost attempt leaves its job in, and for how long.

Pure: a :class:`RetryPolicy` decides from the attempt number and what the attempt raised, with no database
and no clock, so every rule here is tested on its own.

Delays double per attempt from a base up to a cap. With **full jitter** (the default) each delay is drawn
uniformly between zero and that doubled value, so a thousand jobs that failed in the same second (an API
outage) come back spread over the delay window instead of all together. A wait the server named
(``JobThrottled(retry_after=…)``) is kept exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import DeclarationError, JobAbandoned, JobThrottled
from synclane_provider.core.numbers import whole
from synclane_provider.core.states import JobStatus


class Jitter(StrEnum):
    FULL = "full"
    """Each delay drawn uniformly from [0, the doubled delay]."""
    NONE = "none"
    """Each delay exactly the doubled delay."""


def backoff(attempt: int, base: timedelta, cap: timedelta) -> timedelta:
    """``base`` doubled per attempt after the first, never more than ``cap``.

    >>> backoff(1, timedelta(minutes=1), timedelta(hours=1))
    datetime.timedelta(seconds=60)
    >>> backoff(4, timedelta(minutes=1), timedelta(hours=1))
    datetime.timedelta(seconds=480)
    >>> backoff(30, timedelta(minutes=1), timedelta(hours=1))
    datetime.timedelta(seconds=3600)
    """
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt}")
    seconds = base.total_seconds() * 2.0 ** min(attempt - 1, 64)
    return cap if seconds >= cap.total_seconds() else timedelta(seconds=seconds)


@dataclass(frozen=True)
class Failure:
    """The state a failed attempt leaves its job in."""

    status: JobStatus
    delay: timedelta


@dataclass(frozen=True)
class RetryPolicy:
    """How a queue's jobs are retried. ``Queue(retry=RetryPolicy(...))``; the defaults are the queue's.

    :param max_attempts: regular attempts; the one that uses them up defers the job (it steps aside for the
        rest of its lane), and the attempt after that abandons it.
    :param retry_delay, retry_max_delay: the delay after a failure, doubled per attempt, capped.
    :param throttle_delay, throttle_max_delay: the same after a throttle that named no wait.
    :param jitter: :attr:`Jitter.FULL` (the default) or :attr:`Jitter.NONE`.
    :param seed: seeds the jitter, for tests that want the same delays every run.

    >>> policy = RetryPolicy(max_attempts=3, retry_delay=timedelta(seconds=10), jitter=Jitter.NONE)
    >>> policy.after_failure(2, RuntimeError("503"))
    Failure(status=<JobStatus.FAILED: 'failed'>, delay=datetime.timedelta(seconds=20))
    >>> policy.after_failure(3, RuntimeError("503")).status, policy.after_failure(4, RuntimeError("503")).status
    (<JobStatus.DEFERRED: 'deferred'>, <JobStatus.ABANDONED: 'abandoned'>)
    """

    max_attempts: int = 5
    retry_delay: timedelta = timedelta(minutes=1)
    retry_max_delay: timedelta = timedelta(hours=1)
    throttle_delay: timedelta = timedelta(minutes=5)
    throttle_max_delay: timedelta = timedelta(minutes=30)
    jitter: Jitter = Jitter.FULL
    seed: int | None = None
    _random: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not whole(self.max_attempts, 1):
            raise DeclarationError(f"max_attempts must be a positive integer, got {self.max_attempts!r}")
        for name in ("retry_delay", "retry_max_delay", "throttle_delay", "throttle_max_delay"):
            value = getattr(self, name)
            if not isinstance(value, timedelta):
                raise DeclarationError(f"{name} must be a timedelta, got {value!r}")
            if value <= timedelta(0):
                raise DeclarationError(f"{name} must be positive, got {duration_text(value)}")
        for base, cap in (("retry_delay", "retry_max_delay"), ("throttle_delay", "throttle_max_delay")):
            if getattr(self, cap) < getattr(self, base):
                raise DeclarationError(
                    f"{cap} ({duration_text(getattr(self, cap))}) is shorter than {base} "
                    f"({duration_text(getattr(self, base))})"
                )
        try:
            object.__setattr__(self, "jitter", Jitter(self.jitter))
        except ValueError:
            raise DeclarationError(f"jitter must be 'full' or 'none', got {self.jitter!r}") from None
        object.__setattr__(self, "_random", random.Random(self.seed))

    def after_failure(self, attempt: int, exc: BaseException) -> Failure:
        """Where a job goes after attempt number ``attempt`` raised ``exc``, and for how long.

        Attempts below ``max_attempts`` fail and wait; the one that uses them up defers the job, which waits
        the same way and then runs only when nothing else of its lane is due; the attempt after that, or a
        :class:`JobAbandoned`, abandons it until a person requeues it. A throttle never abandons: the server
        only said "not now", so a throttled last attempt leaves the job deferred for another one.
        """
        throttled = isinstance(exc, JobThrottled)
        if isinstance(exc, JobAbandoned) or (attempt > self.max_attempts and not throttled):
            return Failure(JobStatus.ABANDONED, timedelta(0))
        status = JobStatus.DEFERRED if attempt >= self.max_attempts else JobStatus.FAILED
        if isinstance(exc, JobThrottled) and exc.retry_after is not None:
            return Failure(status, exc.retry_after)  # the server's own wait, kept exactly
        if throttled:
            return Failure(status, self._jittered(backoff(attempt, self.throttle_delay, self.throttle_max_delay)))
        return Failure(status, self._jittered(backoff(attempt, self.retry_delay, self.retry_max_delay)))

    def _jittered(self, delay: timedelta) -> timedelta:
        if self.jitter is Jitter.NONE:
            return delay
        return delay * self._random.random()
