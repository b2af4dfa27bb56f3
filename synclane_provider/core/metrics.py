"""What the engine counts and times, and the small interface it reports them through.

The engine imports nothing from Airflow, so it never talks to StatsD or OpenTelemetry itself: workers and
the planning run report to a :class:`Metrics` sink given to them (:class:`NoMetrics` by default), and the
provider passes one that forwards to Airflow's own ``Stats`` (``synclane_provider.stats``), so the metrics
go wherever the user configured Airflow's (StatsD, Datadog, OpenTelemetry).

Every metric is declared once in :data:`CATALOGUE` with its kind and tags; the engine emits only names from
it (a test holds docs/metrics.md to it), so the documented list is the emitted list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class Kind(StrEnum):
    COUNTER = "counter"
    TIMER = "timer"
    GAUGE = "gauge"


@dataclass(frozen=True)
class Metric:
    """One metric: its full name, what kind of value it is, its tags in order, and what it says."""

    name: str
    kind: Kind
    tags: tuple[str, ...]
    description: str


JOBS_FINISHED = Metric(
    "synclane.jobs.finished",
    Kind.COUNTER,
    ("queue", "type", "outcome"),
    "a worker's attempt at a job ended; outcome is completed, failed, deferred, abandoned, released (handed back "
    "on a stop), lease_lost or left_running",
)
PAGES = Metric("synclane.pages", Kind.COUNTER, ("queue", "type"), "pages handled (the handler returned a page)")
RECORDS = Metric("synclane.records", Kind.COUNTER, ("queue", "type"), "records the handlers reported storing")
PAGE_DURATION = Metric(
    "synclane.page.duration",
    Kind.TIMER,
    ("queue", "type"),
    "handler time of one page, whatever its end (a page, an error, a throttle)",
)
TAKE_WAIT = Metric(
    "synclane.take.wait",
    Kind.TIMER,
    ("queue", "type"),
    "from the moment a job was due (next_run_at) to the moment a worker took it: how far the workers are behind",
)
THROTTLES = Metric("synclane.throttles", Kind.COUNTER, ("queue", "type"), "pages whose handler raised JobThrottled")
LANE_LEARNT_RATE = Metric(
    "synclane.lane.learnt_rate",
    Kind.GAUGE,
    ("queue", "lane"),
    "requests a second a lane keeps as learnt from its API's answers (rate-limit headers, or halved by a 429), "
    "sent when it learns",
)
LEASE_TAKEOVERS = Metric(
    "synclane.lease.takeovers",
    Kind.COUNTER,
    ("queue", "type"),
    "jobs taken over from a worker whose lease lapsed (a worker died or hung)",
)
QUEUE_WAITING = Metric(
    "synclane.queue.waiting", Kind.GAUGE, ("queue",), "jobs pending, failed (waiting to retry) or deferred"
)
QUEUE_RUNNING = Metric("synclane.queue.running", Kind.GAUGE, ("queue",), "jobs running")
QUEUE_ABANDONED = Metric("synclane.queue.abandoned", Kind.GAUGE, ("queue",), "jobs abandoned, waiting for a person")
QUEUE_MAX_LAG = Metric(
    "synclane.queue.max_freshness_lag",
    Kind.GAUGE,
    ("queue",),
    "seconds: the largest freshness lag among the owners the owner source lists (now minus the end of the newest "
    "completed window of a windowed type); 0 while none has completed a window",
)

OWNERS_HEALTHY = Metric(
    "synclane.owners.healthy",
    Kind.GAUGE,
    ("queue",),
    "owners the owner source lists that are healthy: none of paused, failing, degraded or behind",
)
OWNERS_DEGRADED = Metric(
    "synclane.owners.degraded",
    Kind.GAUGE,
    ("queue",),
    "listed owners degraded: failing attempts in a row, or an abandoned job waiting for a person",
)
OWNERS_FAILING = Metric(
    "synclane.owners.failing", Kind.GAUGE, ("queue",), "listed owners failing: their period is stretched"
)
OWNERS_PAUSED = Metric(
    "synclane.owners.paused",
    Kind.GAUGE,
    ("queue",),
    "listed owners paused (by their handler or a person) until resumed",
)
OWNERS_BEHIND = Metric(
    "synclane.owners.behind",
    Kind.GAUGE,
    ("queue",),
    "listed owners otherwise healthy whose data lags more than the queue's max_lag",
)

CATALOGUE: tuple[Metric, ...] = (
    JOBS_FINISHED,
    PAGES,
    RECORDS,
    PAGE_DURATION,
    TAKE_WAIT,
    THROTTLES,
    LANE_LEARNT_RATE,
    LEASE_TAKEOVERS,
    QUEUE_WAITING,
    QUEUE_RUNNING,
    QUEUE_ABANDONED,
    QUEUE_MAX_LAG,
    OWNERS_HEALTHY,
    OWNERS_DEGRADED,
    OWNERS_FAILING,
    OWNERS_PAUSED,
    OWNERS_BEHIND,
)
"""Every metric the engine emits."""


class Metrics(Protocol):
    """Where the engine reports what it counts. Calls must be cheap and must never raise: they run per page.

    ``tags`` hold exactly the metric's declared tags. Timings are in seconds.
    """

    def incr(self, metric: Metric, tags: Mapping[str, str], count: int = 1) -> None: ...

    def timing(self, metric: Metric, tags: Mapping[str, str], seconds: float) -> None: ...

    def gauge(self, metric: Metric, tags: Mapping[str, str], value: float) -> None: ...


class NoMetrics:
    """The default sink: reports nothing (the engine used on its own, outside Airflow)."""

    def incr(self, metric: Metric, tags: Mapping[str, str], count: int = 1) -> None:
        pass

    def timing(self, metric: Metric, tags: Mapping[str, str], seconds: float) -> None:
        pass

    def gauge(self, metric: Metric, tags: Mapping[str, str], value: float) -> None:
        pass


NO_METRICS: Metrics = NoMetrics()
