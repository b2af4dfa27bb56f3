"""Loading the plugin, as every Airflow process does, builds no app: only the API server's read of its apps does."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.airflow

LOAD_THEN_SERVE = textwrap.dedent(
    """
    import sys

    from airflow import plugins_manager

    import synclane_provider.plugins.synclane as plugin_module

    plugins = plugins_manager._get_plugins()[0]  # what the scheduler and the DAG processor load
    assert [p for p in plugins if p.name == "synclane"], [p.name for p in plugins]
    assert "synclane_provider.plugins.app" not in sys.modules, "loading the plugin imported the app"
    assert plugin_module.served_app.cache_info().currsize == 0, "loading the plugin built the app"

    # What the API server reads (get_fastapi_plugins; the page's tests serve it through a real API server).
    [served] = [app for plugin in plugins for app in plugin.fastapi_apps if app["name"] == "SyncLane"]
    from fastapi import FastAPI

    assert isinstance(served["app"], FastAPI) and served["url_prefix"] == "/synclane", served
    assert plugin_module.SyncLanePlugin.fastapi_apps[0]["app"] is served["app"], "built more than once"
    print("ok")
    """
)


def test_loading_the_plugin_builds_no_app_and_serving_it_builds_one():
    done = subprocess.run([sys.executable, "-c", LOAD_THEN_SERVE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
