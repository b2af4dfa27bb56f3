"""Every SyncLane operator and sensor takes the same queue arguments, templated, from one base."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow


def every_queue_task() -> list[type]:
    from synclane_provider.operators.asset_events import SyncLaneAssetsOperator
    from synclane_provider.operators.health import SyncLaneHealthCheckOperator
    from synclane_provider.operators.plan import SyncLanePlanOperator
    from synclane_provider.operators.work import SyncLaneWorkOperator
    from synclane_provider.sensors.drained import SyncLaneDrainedSensor
    from synclane_provider.sensors.initial_load import SyncLaneInitialLoadSensor

    return [
        SyncLanePlanOperator,
        SyncLaneWorkOperator,
        SyncLaneHealthCheckOperator,
        SyncLaneAssetsOperator,
        SyncLaneDrainedSensor,
        SyncLaneInitialLoadSensor,
    ]


@pytest.mark.parametrize("task_class", every_queue_task(), ids=lambda task_class: task_class.__name__)
def test_the_declaration_queue_and_connection_are_rendered_as_templates(task_class):
    from synclane_provider.operators.base import QueueOperator

    assert issubclass(task_class, QueueOperator)
    task = task_class(
        task_id="t",
        declaration="{{ params.module }}:synclane",
        synclane_queue="{{ params.queue }}",
        synclane_conn_id="{{ params.conn }}",
    )
    task.render_template_fields({"params": {"module": "my_sync.declaration", "queue": "shops", "conn": "sync_db"}})
    assert (task.declaration, task.synclane_queue, task.synclane_conn_id) == (
        "my_sync.declaration:synclane",
        "shops",
        "sync_db",
    )


def test_the_former_argument_name_still_names_the_declaration_with_a_warning():
    from airflow.exceptions import AirflowProviderDeprecationWarning

    for task_class in every_queue_task():
        with pytest.warns(AirflowProviderDeprecationWarning, match="use declaration="):
            task = task_class(task_id="t", synclane="my_sync.declaration:synclane", synclane_queue="shops")
        assert task.declaration == "my_sync.declaration:synclane", task_class
