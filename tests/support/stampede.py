"""The stampede: an API outage with many jobs in flight, and when the retries come back.

Used by ``tests/test_stampede.py`` (full jitter spreads the retries; without jitter they all return in one
second, which shows the measurement can fail) and by ``bench/stampede.py``.

Time is a :class:`PinnedClock` moved in small ticks, and one worker slot drains whatever is due at each tick,
so a run is exact and repeatable: every job's first page hits the API at the same instant (200 requests in
flight when it goes down), the retry delays come from the policy's seeded random, and the fake API logs each
request at the pinned time. No sleeps: a minute of retries takes a few seconds of real time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from synclane_provider.core import Job, Operations, Owner, Page, Queue, SnapshotType, SyncLane, WorkerSlot
from synclane_provider.core.clock import PinnedClock
from synclane_provider.core.declare.retry import Jitter, RetryPolicy

START = datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc)


class ServiceUnavailable(RuntimeError):
    """What the fake API raises while it is down (an HTTP 503)."""


@dataclass
class FakeApi:
    """An API that answers 503 until ``down_until`` and logs every request at the clock's time."""

    clock: PinnedClock
    down_until: datetime
    requests: list[tuple[datetime, str, bool]] = field(default_factory=list)

    def get(self, owner: str) -> int:
        now = self.clock.now
        up = now >= self.down_until
        self.requests.append((now, owner, up))
        if not up:
            raise ServiceUnavailable("503 Service Unavailable")
        return 1


@dataclass(frozen=True)
class StampedeResult:
    jobs: int
    outage: timedelta
    first_after: dict[int, int]
    """Second after the API came back -> how many jobs made their first request after the outage in it."""
    requests_per_second: dict[int, int]
    """Second after the outage began -> every request the API saw in it (failed ones too)."""
    completed: int

    @property
    def max_per_bucket(self) -> int:
        return max(self.first_after.values(), default=0)

    @property
    def spread_seconds(self) -> int:
        """From the first to the last second in which a job came back."""
        return max(self.first_after) - min(self.first_after) + 1 if self.first_after else 0


def stampede(
    database_url: str,
    schema: str,
    *,
    jobs: int = 200,
    outage: timedelta = timedelta(seconds=10),
    retry_delay: timedelta = timedelta(seconds=10),
    retry_max_delay: timedelta = timedelta(minutes=2),
    jitter: Jitter = Jitter.FULL,
    seed: int = 13,
    tick: timedelta = timedelta(milliseconds=250),
    give_up_after: timedelta = timedelta(minutes=30),
) -> StampedeResult:
    """``jobs`` jobs (one owner and lane each) all start at once as the API goes down for ``outage``.

    Returns, per second after the API is back, how many jobs made their first request after the outage:
    what the API sees once it recovers. With full jitter these spread over the delay window; without, they
    arrive together.
    """
    clock = PinnedClock(START)
    api = FakeApi(clock, START + outage)

    def fetch(job: Job) -> Page:
        return Page(None, api.get(job.owner))

    accounts = [Owner(f"account-{n:04d}") for n in range(jobs)]
    policy = RetryPolicy(
        max_attempts=50, retry_delay=retry_delay, retry_max_delay=retry_max_delay, jitter=jitter, seed=seed
    )
    synclane = SyncLane(
        queues=[
            Queue(
                "api",
                owners=lambda queue: accounts,
                retry=policy,
                types=[SnapshotType("items", fetch, every=timedelta(days=1))],
            )
        ],
        schema=schema,
    )
    database = synclane.database(database_url)
    completed = 0
    with Operations(synclane, database, clock=clock) as ops, WorkerSlot(synclane, database, "api", clock=clock) as slot:
        ops.plan("api")
        while clock.now - START < give_up_after:
            completed = slot.drain().outcomes["completed"]  # the slot's summary adds up across drains
            if completed >= jobs:
                break
            clock.advance(tick)
    first_after: Counter[int] = Counter()
    seen: set[str] = set()
    for at, owner, _ in api.requests:
        if at >= api.down_until and owner not in seen:
            seen.add(owner)
            first_after[int((at - api.down_until).total_seconds())] += 1
    per_second = Counter(int((at - START).total_seconds()) for at, _, _ in api.requests)
    return StampedeResult(jobs, outage, dict(sorted(first_after.items())), dict(sorted(per_second.items())), completed)
