"""The provider registers with Airflow: the entry point resolves and everything it lists imports."""

from __future__ import annotations

import importlib
import inspect
import logging
from importlib.metadata import entry_points

import pytest

pytestmark = pytest.mark.airflow


def provider_info() -> dict:
    [entry] = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("synclane_provider")]
    return entry.load()()


def test_the_entry_point_resolves_to_the_provider_info():
    info = provider_info()
    assert info["package-name"] == "airflow-provider-synclane"  # must equal the distribution name
    assert info["name"] == "SyncLane"
    assert info["versions"] == [importlib.metadata.version("airflow-provider-synclane")]


def test_every_listed_module_and_hook_imports_and_defines_what_it_is_listed_for():
    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    info = provider_info()
    kinds = {"hooks": BaseHook, "operators": BaseOperator, "sensors": BaseSensorOperator, "triggers": BaseTrigger}
    for kind, base in kinds.items():
        modules = [name for entry in info[kind] for name in entry["python-modules"]]
        assert modules, kind
        for name in modules:
            module = importlib.import_module(name)
            defined = [
                obj
                for obj in vars(module).values()
                if inspect.isclass(obj) and obj.__module__ == name and issubclass(obj, base)
            ]
            assert defined, f"{name} defines no {kind[:-1]}"
    [conn_type] = info["connection-types"]
    module_name, _, class_name = conn_type["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module_name), class_name)
    assert hook.conn_type == conn_type["connection-type"] == "synclane"


def test_airflow_discovers_the_provider_its_connection_type_and_its_hook():
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert ProvidersManager().providers["airflow-provider-synclane"].version == "0.1.0"
    runtime = ProvidersManagerTaskRuntime()
    assert runtime.hooks["synclane"].hook_class_name == "synclane_provider.hooks.synclane.SyncLaneHook"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "synclane_provider.triggers.initial_loads.InitialLoadsTrigger",
            "synclane_provider.triggers.initial_load_watcher.InitialLoadsTrigger",
        ),
        (
            "synclane_provider.operators.assets.SyncLaneAssetsOperator",
            "synclane_provider.operators.asset_events.SyncLaneAssetsOperator",
        ),
    ],
)
def test_the_classpaths_of_the_previous_release_still_import_the_same_class(old, new):
    # Airflow keeps a deferred task's trigger classpath in its database and imports it when the trigger resumes.
    def imported(classpath: str) -> type:
        module, _, name = classpath.rpartition(".")
        return getattr(importlib.import_module(module), name)

    assert imported(old) is imported(new)


def test_airflow_looks_for_the_provider_s_example_dags_without_an_error():
    """With ``load_examples`` on, Airflow imports each provider's module by its distribution's name to look for an
    ``example_dags`` folder, and logs an error with a traceback in every command when it cannot: it finds one, and
    no example DAGs in it."""
    from airflow.dag_processing.bundles import manager

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.ERROR)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    kept, bundles = Kept(), []
    manager.log.addHandler(kept)  # on Airflow's logger itself: its logging setup may not pass records on
    try:
        manager._add_provider_example_dags_to_bundle(bundles)
    finally:
        manager.log.removeHandler(kept)
    assert [message for message in kept.messages if "synclane" in message] == []
    assert [bundle.name for bundle in bundles if "synclane" in bundle.name] == []
