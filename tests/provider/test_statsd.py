"""Metrics reach StatsD: Airflow configured to send to a UDP socket here, the real DAGs run with dag.test().

Airflow's task runner initializes ``Stats`` from ``[metrics]`` at the start of every task process; the test
does the same after pointing the configuration at its socket, and puts the no-op logger back afterwards.
"""

from __future__ import annotations

import doctest

import pytest

import synclane_provider.stats
from synclane_provider.core.metrics import CATALOGUE, LANE_LEARNT_RATE, Kind
from tests.support import provider_declaration as decl
from tests.support.airflow_env import REPO
from tests.support.helpers import execute
from tests.support.provider_helpers import operations
from tests.support.statsd import Listener

pytestmark = pytest.mark.airflow

STATSD_TYPE = {Kind.COUNTER: "c", Kind.TIMER: "ms", Kind.GAUGE: "g"}


@pytest.fixture
def statsd(monkeypatch):
    """Airflow's StatsD logger sending to a :class:`Listener` (with InfluxDB-style tags on)."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = Listener()
    for option, value in {
        "STATSD_ON": "True",
        "STATSD_HOST": "127.0.0.1",
        "STATSD_PORT": str(listener.port),
        "STATSD_PREFIX": "airflow",
        "STATSD_INFLUXDB_ENABLED": "True",
        "LEGACY_NAMES_ON": "True",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{option}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=True)
    try:
        yield listener
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=True)
        listener.close()


def assert_as_declared(got: dict, kinds: set[Kind], *, besides: frozenset = frozenset()) -> None:
    """Each synclane metric received is a catalogue name (or its flat form) with its StatsD type, and every
    declared metric of ``kinds`` was received (but those ``besides``, which another task sends)."""
    declared = {f"airflow.{metric.name}": metric for metric in CATALOGUE}
    ours = {name: packets for name, packets in got.items() if name.startswith("airflow.synclane.")}
    for name, packets in ours.items():
        metric = declared.get(name) or next(m for n, m in declared.items() if name.startswith(n + "."))
        assert {kind for _, kind, _ in packets} == {STATSD_TYPE[metric.kind]}, name
    assert {name for name, metric in declared.items() if metric.kind in kinds and metric not in besides} <= set(ours)


@pytest.fixture(scope="module")
def dags(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def test_the_worker_dag_sends_job_page_record_take_throttle_and_takeover_metrics(dags, provider_schema, admin, statsd):
    with operations(decl.synclane) as ops:
        planned = ops.plan("shops")
    # A worker died holding a job: its lease ran out a minute ago, and a slot of the DAG takes the job over.
    execute(
        admin,
        provider_schema,
        "UPDATE {jobs} SET status = 'running', leased_by = 'dead-worker', "
        "heartbeat_at = now() - interval '6 minutes', lease_expires_at = now() - interval '1 minute' "
        "WHERE owner = 'initech' AND type = 'products'",
    )

    run = dags["synclane_work"].test(run_conf={"idle_timeout": decl.THROTTLE_SECONDS, "max_run_time": 120})
    assert run.state == "success"
    got = statsd.received()

    jobs = planned.total - 1  # every job but the one taken over completes
    finished = got["airflow.synclane.jobs.finished"]
    assert sum(v for tags, kind, v in finished if tags.endswith(",outcome=completed") and kind == "c") == jobs
    assert (
        sum(v for _, _, v in got["airflow.synclane.jobs.finished.shops.orders.completed"]) == planned.inserted["orders"]
    )
    assert (
        sum(v for _, _, v in got["airflow.synclane.jobs.finished.shops.products.failed"]) == 2
    )  # a throttle, the lost attempt
    assert {tags for tags, _, _ in got["airflow.synclane.pages"]} == {
        ",queue=shops,type=orders",
        ",queue=shops,type=products",
    }
    assert sum(v for _, _, v in got["airflow.synclane.pages"]) == 2 * jobs  # 100 records, 50 a page
    assert sum(v for _, _, v in got["airflow.synclane.records"]) == 100 * jobs
    assert {kind for _, kind, _ in got["airflow.synclane.page.duration"]} == {"ms"}
    assert len(got["airflow.synclane.page.duration"]) == 2 * jobs + 1  # the throttled call too
    assert len(got["airflow.synclane.take.wait"]) == jobs + 1  # the throttled job was taken twice
    assert [v for _, _, v in got["airflow.synclane.throttles.shops.products"]] == [1]
    assert got["airflow.synclane.lease.takeovers"] == [(",queue=shops,type=products", "c", 1.0)]
    assert_as_declared(got, {Kind.COUNTER, Kind.TIMER})


def test_the_planning_dag_sends_the_queue_gauges(dags, provider_schema, admin, statsd):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        [job] = ops.list_jobs("shops", owner="globex", type="products")
        ops.abandon("shops", job.id, "access revoked")
    execute(admin, provider_schema, "UPDATE {jobs} SET status = 'completed' WHERE type = 'orders'")
    execute(
        admin,
        provider_schema,
        "UPDATE {jobs} SET status = 'running', leased_by = 'w', "
        "lease_expires_at = now() + interval '5 minutes' WHERE owner = 'acme-us' AND type = 'products'",
    )

    assert dags["synclane_plan"].test().state == "success"
    got = statsd.received()

    assert got["airflow.synclane.queue.waiting"] == [(",queue=shops", "g", 2.0)]
    assert got["airflow.synclane.queue.running"] == [(",queue=shops", "g", 1.0)]
    assert got["airflow.synclane.queue.abandoned"] == [(",queue=shops", "g", 1.0)]
    assert got["airflow.synclane.queue.abandoned.shops"] == [("", "g", 1.0)]
    [(tags, kind, lag)] = got["airflow.synclane.queue.max_freshness_lag"]
    assert (tags, kind) == (",queue=shops", "g") and 0 <= lag < decl.ORDERS.every.total_seconds() + 60
    assert_as_declared(got, {Kind.GAUGE}, besides=frozenset({LANE_LEARNT_RATE}))  # a worker's, as it learns


def test_the_flat_names_hold_the_tag_values_made_safe():
    failed, _ = doctest.testmod(synclane_provider.stats)
    assert failed == 0
