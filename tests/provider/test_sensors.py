"""The sensors: return at once when their condition holds, defer otherwise, and their triggers fire when it comes true."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from synclane_provider.core import WorkerSlot
from synclane_provider.operators.work import SyncLaneWorkOperator
from synclane_provider.sensors.drained import SyncLaneDrainedSensor
from synclane_provider.sensors.initial_load import SyncLaneInitialLoadSensor
from synclane_provider.triggers.drained import DrainedTrigger
from synclane_provider.triggers.initial_load import InitialLoadTrigger
from tests.provider.conftest import DECLARATION
from tests.support import provider_declaration as decl
from tests.support.helpers import execute
from tests.support.provider_helpers import in_background, operations

pytestmark = pytest.mark.airflow


def initial_load(**kwargs) -> SyncLaneInitialLoadSensor:
    settings = dict(
        task_id="loaded", declaration=DECLARATION, synclane_queue="shops", deferrable=True, poke_interval=0.2
    )
    settings.update(kwargs)
    return SyncLaneInitialLoadSensor(**settings)


def drained(**kwargs) -> SyncLaneDrainedSensor:
    settings = dict(
        task_id="drained", declaration=DECLARATION, synclane_queue="shops", deferrable=True, poke_interval=0.2
    )
    settings.update(kwargs)
    return SyncLaneDrainedSensor(**settings)


def plan_and_drain_once() -> None:
    """Plan the shops and run everything due now: all but globex's throttled products completes."""
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        slot = WorkerSlot(decl.synclane, ops.session.database, "shops")
        try:
            slot.drain()
        finally:
            slot.close()


def work_until_idle() -> dict:
    return SyncLaneWorkOperator(
        task_id="work",
        declaration=DECLARATION,
        synclane_queue="shops",
        deferrable=False,
        idle_timeout=decl.THROTTLE_SECONDS + 1,
    ).execute({})


def test_initial_load_already_complete_returns_at_once(provider_schema):
    plan_and_drain_once()
    assert initial_load(owner_id="acme-us").execute({}) is None  # no TaskDeferred
    assert initial_load(job_type="orders").execute({}) is None  # every owner's orders history is in


def test_initial_load_not_complete_defers_and_its_trigger_fires_when_it_is(provider_schema):
    plan_and_drain_once()  # globex's products were throttled and are due again in a moment
    sensor = initial_load()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, InitialLoadTrigger)
    assert trigger.serialize()[1] == {
        "synclane_conn_id": "synclane_default",
        "schema": provider_schema,
        "queue": "shops",
        "owners": ["globex"],  # only the owners still loading
        "job_type": None,
        "settled": False,
        "more": 0,
        "poll_interval": 0.2,
        "give_up_after": 300.0,
    }
    assert deferred.value.method_name == "execute_complete"
    waiting = in_background(trigger)
    work_until_idle()
    event = waiting.result(timeout=30)
    assert event == {"status": "success", "queue": "shops", "owners": 1, "more": 0}
    sensor.execute_complete({}, event)


def test_the_initial_load_trigger_stays_bounded_for_any_number_of_owners_and_the_sensor_waits_for_each_part(
    provider_schema, monkeypatch
):
    import json

    from synclane_provider.triggers import initial_load as trigger_module

    many = [f"owner-{'x' * 200}-{i}" for i in range(100_000)]
    part = trigger_module.first_part(many)
    trigger = InitialLoadTrigger(owners=part, more=len(many) - len(part), synclane_conn_id="c", schema="s", queue="q")
    size = len(json.dumps(trigger.serialize()[1]))
    assert size < trigger_module.MAX_OWNER_BYTES + 1000 and 0 < len(part) < len(many)
    with pytest.raises(ValueError, match="at most 16000 bytes of owner ids"):
        InitialLoadTrigger(owners=many, synclane_conn_id="c", schema="s", queue="q")

    # A sensor waiting for more owners than one trigger carries waits a part at a time.
    plan_and_drain_once()
    monkeypatch.setattr(trigger_module, "MAX_OWNER_BYTES", 1)  # one owner per trigger
    sensor = initial_load(owner_id=None)
    monkeypatch.setattr(sensor, "_owners", lambda queue: ["globex", "umbrella"])  # umbrella has nothing planned
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    first = deferred.value.trigger
    assert (first.owners, first.more) == (["globex"], 1)
    work_until_idle()
    event = in_background(first).result(timeout=30)
    assert event == {"status": "success", "queue": "shops", "owners": 1, "more": 1}
    with pytest.raises(TaskDeferred) as again:  # globex is done; umbrella is not: it waits on for umbrella
        sensor.execute_complete({}, event)
    assert (again.value.trigger.owners, again.value.trigger.more) == (["umbrella"], 0)


def test_an_owner_with_nothing_planned_is_not_loaded(provider_schema):
    with pytest.raises(TaskDeferred):
        initial_load(owner_id="initech").execute({})


def test_abandoned_initial_jobs_count_only_when_allowed(provider_schema, admin):
    plan_and_drain_once()
    execute(
        admin, provider_schema, "UPDATE {jobs} SET status = 'abandoned' WHERE owner = 'globex' AND status = 'failed'"
    )
    with pytest.raises(TaskDeferred):
        initial_load(owner_id="globex").execute({})
    assert initial_load(owner_id="globex", allow_abandoned=True).execute({}) is None


def test_an_unknown_job_type_fails_instead_of_waiting_forever(provider_schema):
    with pytest.raises(LookupError, match="no job type 'refunds'"):
        initial_load(job_type="refunds").execute({})


def test_drained_already_returns_at_once(provider_schema):
    assert drained().execute({}) is None


def test_not_drained_defers_and_its_trigger_fires_when_the_queue_drains(provider_schema):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    sensor = drained()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, DrainedTrigger)
    assert trigger.serialize()[1] == {
        "synclane_conn_id": "synclane_default",
        "schema": provider_schema,
        "queue": "shops",
        "lane": None,
        "poll_interval": 0.2,
        "give_up_after": 300.0,
    }
    waiting = in_background(trigger)
    work_until_idle()
    event = waiting.result(timeout=30)
    assert event == {"status": "success", "queue": "shops", "lane": None}
    sensor.execute_complete({}, event)


def test_one_lane_can_be_drained_while_the_queue_is_not(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    execute(admin, provider_schema, "UPDATE {jobs} SET status = 'completed' WHERE lane = 'acme'")
    assert drained(lane="acme").execute({}) is None
    with pytest.raises(TaskDeferred):
        drained(lane="globex").execute({})


def test_a_sensor_trigger_error_fails_the_task_with_its_message():
    with pytest.raises(AirflowException, match="database unreachable"):
        drained().execute_complete({}, {"status": "error", "message": "database unreachable for 300s"})
    with pytest.raises(AirflowException, match="database unreachable"):
        initial_load().execute_complete({}, {"status": "error", "message": "database unreachable for 300s"})


def test_without_deferral_the_sensors_poke(provider_schema):
    assert drained(deferrable=False).poke({}) is True
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    assert drained(deferrable=False).poke({}) is False
    assert initial_load(deferrable=False, owner_id="globex").poke({}) is False
