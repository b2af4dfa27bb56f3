"""The system's Chromium for the tests that look at the SyncLane page (Playwright drives it, downloading none)."""

from __future__ import annotations

import os
import shutil

import pytest


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
