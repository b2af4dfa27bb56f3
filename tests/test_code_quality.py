"""The engine's types hold: mypy, strict on ``synclane_provider/core`` (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.airflow_env import REPO


def test_the_engine_type_checks_strictly():
    checked = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
