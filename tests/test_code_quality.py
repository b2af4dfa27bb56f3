"""The code keeps the house rules, as configured in pyproject.toml: mypy strict on ``synclane_provider/core``,
ruff's lint and ruff's format on the whole repository."""

from __future__ import annotations

import subprocess
import sys

from tests.support.airflow_env import REPO


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_the_engine_type_checks_strictly():
    checked = run("mypy")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_code_passes_the_linter():
    checked = run("ruff", "check", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_code_is_formatted():
    checked = run("ruff", "format", "--check", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr
