"""The tutorial "Your first sync in your own Airflow" works as written: its declaration runs, and the DAGs take it."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from synclane_provider.core import Operations, WorkerPool
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.locate import locate_synclane
from tests.support.airflow_env import REPO
from tests.support.first_sync import tutorial_declaration

pytestmark = pytest.mark.airflow


@pytest.fixture
def shop_sync(tmp_path, monkeypatch):
    """The tutorial's dags/shop_sync.py, importable as ``shop_sync`` the way Airflow imports from the DAG folder."""
    (tmp_path / "shop_sync.py").write_text(tutorial_declaration(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shop_sync", raising=False)
    yield locate_synclane("shop_sync:synclane")
    sys.modules.pop("shop_sync", None)


def test_the_tutorial_declaration_plans_and_runs(shop_sync, provider_schema, admin):
    synclane = dataclasses.replace(shop_sync, schema=provider_schema)  # the test's schema, not "synclane"
    database = SyncLaneHook().get_database(synclane)
    with Operations(synclane, database) as ops:
        summary = ops.plan("shops")
    assert summary.owners == 3 and summary.inserted["products"] == 3 and summary.inserted["orders"] >= 9
    pool = WorkerPool(synclane, database, "shops")
    try:
        done = pool.drain()
    finally:
        pool.close()
    assert done.outcomes == {"completed": summary.total}
    assert done.records == 20 * 3 + 150 * summary.inserted["orders"]


def test_the_example_dags_take_the_tutorial_declaration(shop_sync, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW__SYNCLANE__DECLARATION", "shop_sync:synclane")  # [synclane], as the tutorial says
    monkeypatch.setenv("AIRFLOW__SYNCLANE__QUEUE", "shops")
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert bag.dags["synclane_work"].description == "Work SyncLane queue shops with 2 slot(s)"
    assert bag.dags["synclane_plan"].description == "Plan SyncLane queue shops every 0:01:00"
