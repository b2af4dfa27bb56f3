"""Assets for downstream DAGs: the URI scheme, and a worker that emits its own events (emit_assets) per type with owners and windows."""

from __future__ import annotations

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from synclane_provider.assets import alias, alias_name, asset, asset_uri
from synclane_provider.operators.asset_events import SyncLaneAssetsOperator
from synclane_provider.operators.work import SyncLaneWorkOperator
from tests.provider.conftest import DECLARATION
from tests.support import provider_declaration as decl
from tests.support.helpers import execute, rows
from tests.support.provider_helpers import first_event, operations

pytestmark = pytest.mark.airflow


def test_a_queue_type_is_an_asset_with_the_synclane_scheme_and_names_survive_it():
    assert asset_uri("synclane", "shops", "orders") == "synclane://synclane/shops/orders"
    assert asset("synclane", "shops", "orders") == Asset(
        uri="synclane://synclane/shops/orders", name="synclane.shops.orders", group="synclane"
    )
    assert asset_uri("s", "a b/c", "x?y") == "synclane://s/a%20b%2Fc/x%3Fy"


def test_airflow_refuses_a_synclane_uri_that_is_not_schema_queue_type():
    with pytest.raises(ValueError, match="synclane://<schema>/<queue>/<type>"):
        Asset("synclane://synclane/shops")


def test_a_worker_that_emits_declares_its_alias_as_an_outlet_when_the_dag_is_parsed():
    operator = SyncLaneWorkOperator(task_id="work", declaration=DECLARATION, synclane_queue="shops", emit_assets=True)
    assert alias("shops") in operator.outlets and alias_name("shops") == "synclane-shops"
    assert SyncLaneWorkOperator(task_id="w", declaration=DECLARATION, synclane_queue="shops").outlets == []
    emitter = SyncLaneAssetsOperator(task_id="assets", declaration=DECLARATION, synclane_queue="shops")
    assert emitter.outlets == [alias("shops")] and emitter.trigger_rule == "all_done"


def test_a_worker_run_emits_one_event_per_type_that_landed_with_owners_windows_and_records(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    # what earlier attempts' pages landed, which the jobs' completions keep and the events add up
    execute(admin, provider_schema, "UPDATE {jobs} SET inserted_count = id, stale_count = 1, deleted_count = 2")
    operator = SyncLaneWorkOperator(
        task_id="work",
        declaration=DECLARATION,
        synclane_queue="shops",
        idle_timeout=30,
        deferrable=True,
        linger=0,  # defers as soon as nothing is due: the run goes on across deferrals
        emit_assets=True,
    )
    outlet_events = OutletEventAccessors()
    context = {"outlet_events": outlet_events}
    with pytest.raises(TaskDeferred) as deferred:  # the throttled job waits: the run goes on after a deferral
        operator.execute(context)
    event = first_event(deferred.value.trigger)
    assert set(event["carry"]["arrivals"]) == {"orders", "products"}  # what landed so far rides in the event
    with pytest.raises(TaskDeferred) as again:  # resumed: the throttled job runs, then the task waits again
        operator.execute_complete(context, event)
    carry = again.value.trigger.serialize()[1]["carry"]
    assert outlet_events[alias("shops")].asset_alias_events == []  # nothing is emitted before the run ends
    summary = operator.execute_complete(context, {**event, "status": "timeout", "carry": carry})
    assert set(summary["arrivals"]) == {"orders", "products"}  # in the returned summary too

    events = outlet_events[alias("shops")].asset_alias_events
    assert sorted(e.dest_asset_key.uri for e in events) == [
        f"synclane://{provider_schema}/shops/orders",
        f"synclane://{provider_schema}/shops/products",
    ]
    by_type = {e.extra["type"]: e.extra for e in events}
    completed = [r for r in rows(admin, provider_schema) if r["status"] == "completed"]
    for type_name, extra in by_type.items():
        mine = [r for r in completed if r["type"] == type_name]
        assert extra["queue"] == "shops" and extra["jobs"] == len(mine)
        assert extra["records"] == sum(r["processed_count"] for r in mine)
        assert set(extra["owners"]) == {r["owner"] for r in mine}
        landed = {name: sum(r[f"{name}_count"] for r in mine) for name in extra["landed"]}
        assert extra["landed"] == landed and landed["inserted"] > 0 and landed["stale"] == len(mine)
    orders = by_type["orders"]["owners"]["acme-us"]
    acme_orders = [r for r in completed if r["type"] == "orders" and r["owner"] == "acme-us"]
    assert orders["window_start"] == min(r["window_start"] for r in acme_orders).isoformat()
    assert orders["window_end"] == max(r["window_end"] for r in acme_orders).isoformat()
    assert "globex" in by_type["products"]["owners"]  # completed after the deferral, in the same event
