"""The Airflow plugin: registered once, through the ``airflow.plugins`` entry point (see pyproject.toml).

The API server mounts the app at ``/synclane``; the UI lists "SyncLane" in its navigation and as a tab on
DAG pages, each showing that app in a frame. ``href`` is relative so that Airflow behind a proxy or under
a base path resolves it against its own address.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from synclane_provider.plugins.app import create_app

URL_PREFIX = "/synclane"


class SyncLanePlugin(AirflowPlugin):
    name = "synclane"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "SyncLane"}]
    external_views = [
        {"name": "SyncLane", "href": "synclane/", "destination": "nav", "url_route": "synclane"},
        {"name": "SyncLane", "href": "synclane/?dag={DAG_ID}", "destination": "dag", "url_route": "synclane_dag"},
    ]
