"""The Airflow plugin: registered once, through the ``airflow.plugins`` entry point (see pyproject.toml).

The API server mounts the app at ``/synclane``; the UI lists "SyncLane" in its navigation and as a tab on
DAG pages, each showing that app in a frame. ``href`` is relative so that Airflow behind a proxy or under
a base path resolves it against its own address.

Every Airflow process loads the plugins (the scheduler and the DAG processor too), but only the API server
reads ``fastapi_apps``: the app (and FastAPI with it) is imported and built on that first read, once.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/synclane"


@cache
def served_app() -> Any:
    """The page's app, built on first use and the same one afterwards."""
    from synclane_provider.plugins.app import create_app

    return create_app()


class _AppsWhenServed:
    """``fastapi_apps`` as Airflow reads it, from the plugin or its class, building the app only then."""

    def __get__(self, plugin: object, owner: type | None = None) -> list[dict[str, Any]]:
        return [{"app": served_app(), "url_prefix": URL_PREFIX, "name": "SyncLane"}]


class SyncLanePlugin(AirflowPlugin):
    name = "synclane"
    fastapi_apps = _AppsWhenServed()  # type: ignore[assignment]
    external_views = [
        {"name": "SyncLane", "href": "synclane/", "destination": "nav", "url_route": "synclane"},
        {"name": "SyncLane", "href": "synclane/?dag={DAG_ID}", "destination": "dag", "url_route": "synclane_dag"},
    ]
