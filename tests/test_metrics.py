"""What workers report to a metrics sink: every name from the catalogue, with exactly its declared tags."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import timedelta

from synclane_provider.core import JobThrottled, Operations, WorkerPool, WorkerSlot
from synclane_provider.core.metrics import (
    CATALOGUE,
    JOBS_FINISHED,
    LEASE_TAKEOVERS,
    PAGE_DURATION,
    PAGES,
    RECORDS,
    TAKE_WAIT,
    THROTTLES,
    Metric,
)
from tests.support.helpers import declare, orders, owners, paged, products


class RecordingMetrics:
    """A sink that keeps every call, and checks each against the catalogue as it comes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], float]] = []
        self._lock = threading.Lock()

    def _keep(self, kind: str, metric: Metric, tags: Mapping[str, str], value: float) -> None:
        assert metric in CATALOGUE and metric.kind.value == kind, metric
        assert tuple(tags) == metric.tags, (metric.name, tags)
        with self._lock:
            self.calls.append((kind, metric.name, dict(tags), value))

    def incr(self, metric: Metric, tags: Mapping[str, str], count: int = 1) -> None:
        self._keep("counter", metric, tags, count)

    def timing(self, metric: Metric, tags: Mapping[str, str], seconds: float) -> None:
        self._keep("timer", metric, tags, seconds)

    def gauge(self, metric: Metric, tags: Mapping[str, str], value: float) -> None:
        self._keep("gauge", metric, tags, value)

    def total(self, metric: Metric, **tags: str) -> float:
        return sum(v for _, name, t, v in self.calls if name == metric.name and tags.items() <= t.items())

    def values(self, metric: Metric) -> list[float]:
        return [v for _, name, _, v in self.calls if name == metric.name]


def throttled_once(job):
    if job.attempt_count == 1:
        raise JobThrottled("slow down", retry_after=timedelta(seconds=30))
    return paged(100)(job)


def test_a_worker_counts_jobs_by_outcome_pages_records_throttles_and_page_time(schema, database_url, clock):
    lane = declare(schema, products(throttled_once), owner_source=owners("acme", "globex"))
    metrics = RecordingMetrics()
    with Operations(lane, lane.database(database_url), clock=clock) as ops:
        ops.plan("shops")
    with WorkerSlot(lane, lane.database(database_url), "shops", clock=clock, metrics=metrics) as slot:
        slot.drain()
        clock.advance(timedelta(seconds=31))
        slot.drain()
    tags = {"queue": "shops", "type": "products"}
    assert metrics.total(JOBS_FINISHED, outcome="failed", **tags) == 2
    assert metrics.total(JOBS_FINISHED, outcome="completed", **tags) == 2
    assert metrics.total(THROTTLES, **tags) == 2
    assert metrics.total(PAGES, **tags) == 4  # two pages of 50 per owner
    assert metrics.total(RECORDS, **tags) == 200
    assert len(metrics.values(PAGE_DURATION)) == 6  # every handler call, the throttled ones too
    assert all(seconds >= 0 for seconds in metrics.values(PAGE_DURATION))
    # Taken the moment they were due the first time, and 1 s after the retry was due the second time.
    assert sorted(metrics.values(TAKE_WAIT)) == [0.0, 0.0, 1.0, 1.0]


def test_a_job_taken_over_from_a_lost_worker_is_counted_as_a_takeover(schema, database_url, clock):
    lane = declare(schema, orders(paged(100)), owner_source=owners("acme"))
    metrics = RecordingMetrics()
    with Operations(lane, lane.database(database_url), clock=clock) as ops:
        ops.plan("shops")
    database = lane.database(database_url)
    with (
        WorkerSlot(lane, database, "shops", clock=clock) as lost,
        WorkerSlot(lane, database, "shops", clock=clock, metrics=metrics) as taker,
    ):
        job = lost.take()
        lost.leases.close()  # it stops renewing: it died
        clock.advance(lane.queue("shops").lease + timedelta(seconds=1))
        taker.run_one(then_continue=False)
    assert metrics.total(LEASE_TAKEOVERS, queue="shops", type="orders") == 1
    assert metrics.total(JOBS_FINISHED, queue="shops", type=job.type, outcome="failed") == 1  # the lost attempt


def test_a_pool_passes_its_sink_to_every_slot(schema, database_url, clock):
    lane = declare(schema, products(paged(50)), owner_source=owners("a", "b", "c"), concurrency=3)
    metrics = RecordingMetrics()
    with Operations(lane, lane.database(database_url), clock=clock) as ops:
        ops.plan("shops")
    WorkerPool(lane, lane.database(database_url), "shops", clock=clock, metrics=metrics).drain()
    assert metrics.total(JOBS_FINISHED, outcome="completed") == 3


def test_the_catalogue_names_each_metric_once_under_synclane():
    names = [metric.name for metric in CATALOGUE]
    assert len(names) == len(set(names))
    assert all(name.startswith("synclane.") for name in names)


def test_docs_metrics_lists_every_metric_with_its_kind_and_tags():
    from tests.support.airflow_env import REPO

    rows = [
        line
        for line in (REPO / "docs/metrics.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `synclane.")
    ]
    documented = []
    for row in rows:
        name, kind, tags = [cell.strip() for cell in row.strip("|").split("|")][:3]
        documented.append((name.strip("`"), kind, tuple(tag.strip(" `") for tag in tags.split(","))))
    assert documented == [(m.name, m.kind.value, m.tags) for m in CATALOGUE]
    assert all(m.description in row for m, row in zip(CATALOGUE, rows, strict=True))
