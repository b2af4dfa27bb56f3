"""One real ``airflow api-server`` with the SyncLane plugin for the page's tests, and the jobs it shows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.api_server import ApiServer, start_api_server
from tests.support.browser import ARTIFACTS, chromium
from tests.support.database import drop_schemas
from tests.support.operate_scene import set_scene


@pytest.fixture(scope="session")
def operate_schema(database_url: str) -> Iterator[str]:
    name = f"synclane_operate_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        drop_schemas(conn, name)


@pytest.fixture(scope="session")
def api_server(database_url: str, operate_schema: str, tmp_path_factory, airflow_db) -> Iterator[ApiServer]:
    set_scene(database_url, operate_schema)  # the schema exists before the server first reads it
    server = start_api_server(tmp_path_factory.mktemp("airflow-page"), database_url=database_url, schema=operate_schema)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scene(database_url: str, operate_schema: str) -> dict[str, int]:
    return set_scene(database_url, operate_schema)


@pytest.fixture
def browser_page():
    """A page of the system's Chromium driven by Playwright (skipped without one, except under ``CI=true``)."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()
