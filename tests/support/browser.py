"""The system's Chromium for the tests that look at the SyncLane page (Playwright drives it, downloading none)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = Path(os.environ.get("SYNCLANE_TEST_ARTIFACTS", PROJECT / "test-artifacts")) / "page"
"""Where the page's screenshots are saved."""
SHOTS = Path(os.environ.get("SYNCLANE_SHOTS", "/work/shots"))
"""A second home for them, when that folder exists."""


def chromium() -> str:
    """The system Chromium, or the reason there is none (a failure under CI, else a skip)."""
    found = next(
        (
            shutil.which(name)
            for name in (os.environ.get("SYNCLANE_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome")
            if name and shutil.which(name)
        ),
        None,
    )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        found, why = None, "the playwright package is not installed (pip install -e '.[test]')"
    else:
        why = "no Chromium found (apt-get install chromium, or set SYNCLANE_CHROMIUM)"
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the browser test cannot run: {why}", pytrace=False)
        pytest.skip(why)
    return found


def synclane_as_admin(page, api_server):
    """Log in with Airflow's own form, then open SyncLane from Airflow's navigation (once the login has landed on
    Airflow's home page, which has the link: going to the page's address while the login still redirects can
    lose it); the page's frame."""
    from playwright.sync_api import expect

    page.goto(api_server.base + "/")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(api_server.password("admin"))
    page.locator("button[type=submit]").click()
    link = page.get_by_role("link", name="SyncLane")
    expect(link).to_have_attribute("href", "/plugin/synclane")
    link.click()
    try:
        expect(page).to_have_url(re.compile(r"/plugin/synclane$"), timeout=15_000)
    except AssertionError:
        # Now and then Airflow's UI lands the click on /plugin/synclane/synclane/ (its router, not the page): the
        # login has landed by now, so the page's own address is safe to open.
        page.goto(api_server.base + "/plugin/synclane")
        expect(page).to_have_url(re.compile(r"/plugin/synclane$"))
    return page.frame_locator("iframe")


def shot(page, name: str) -> None:
    """A screenshot of the whole page under the artifacts and, when that folder exists, under ``$SYNCLANE_SHOTS``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    if SHOTS.is_dir():
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
