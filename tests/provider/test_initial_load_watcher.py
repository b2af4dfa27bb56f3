"""The asset watcher's trigger: wakes on the NOTIFY of a completed initial job and names the owners just loaded."""

from __future__ import annotations

import pytest
from airflow.sdk.serde import deserialize, serialize

from synclane_provider.assets import initial_load_asset
from synclane_provider.core import WorkerSlot
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.triggers.initial_load_watcher import InitialLoadsTrigger
from tests.support import provider_declaration as decl
from tests.support.helpers import execute
from tests.support.provider_helpers import in_background, operations, unique_name, wait_until_waiting

pytestmark = pytest.mark.airflow


def test_the_trigger_round_trips_through_serialization():
    kwargs = dict(synclane_conn_id="c", schema="s", queue="q", job_type="orders", poll_interval=7.0, give_up_after=60.0)
    trigger = InitialLoadsTrigger(**kwargs)
    classpath, serialized = trigger.serialize()
    assert classpath == "synclane_provider.triggers.initial_load_watcher.InitialLoadsTrigger"
    assert serialized == kwargs
    assert deserialize(serialize(serialized)) == kwargs


def test_the_initial_load_asset_is_watched_by_the_trigger():
    watched = initial_load_asset("synclane", "shops", "orders", synclane_conn_id="c", poll_interval=5)
    assert watched.uri == "synclane://synclane/shops/orders/initial-load"
    [watcher] = watched.watchers
    assert watcher.trigger.serialize()[1]["job_type"] == "orders"


def test_the_trigger_fires_on_the_notify_of_a_completed_initial_load_naming_only_the_new_owners(
    provider_schema, admin, connection
):
    name = unique_name("initial-loads")
    conn_id = connection(application_name=name)
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    # globex was loaded before the trigger started: it is the baseline, never announced.
    execute(admin, provider_schema, "UPDATE {jobs} SET status = 'completed' WHERE owner = 'globex'")
    # A poll far longer than the test: only the workers' NOTIFY can wake the trigger in time.
    trigger = InitialLoadsTrigger(
        synclane_conn_id=conn_id, schema=provider_schema, queue="shops", job_type="orders", poll_interval=600
    )
    event = in_background(trigger, timeout=60)
    wait_until_waiting(admin, name, event)
    with WorkerSlot(decl.synclane, SyncLaneHook().get_database(decl.synclane), "shops") as slot:
        slot.drain()
    payload = event.result(timeout=60)
    assert payload["status"] == "success" and payload["queue"] == "shops" and payload["type"] == "orders"
    assert "globex" not in payload["owners"] and set(payload["owners"]) <= {"acme-us", "acme-eu", "initech"}
    assert payload["owners"]  # within the minute the test waits, though its poll is ten: the NOTIFY woke it
