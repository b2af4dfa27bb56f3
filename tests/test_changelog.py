"""The changelog (CHANGELOG.md, Keep a Changelog) agrees with the package: its newest release is the version in
pyproject.toml, in ``synclane_provider.__version__`` and in the provider info Airflow reads, and it names every
migration the package ships."""

from __future__ import annotations

import re
import tomllib
from datetime import date
from importlib import metadata

from synclane_provider import __version__, get_provider_info
from tests.support.airflow_env import REPO

CHANGELOG = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def releases() -> list[tuple[tuple[int, ...], date]]:
    return [(tuple(int(n) for n in v.split(".")), date.fromisoformat(d)) for v, d in RELEASE.findall(CHANGELOG)]


def test_the_changelog_keeps_its_form():
    """An Unreleased section first, then each release as ``## [x.y.z] - yyyy-mm-dd``, newest first; every
    second-level heading is one of them."""
    headings = re.findall(r"^## (.*)$", CHANGELOG, re.MULTILINE)
    assert headings[0] == "[Unreleased]"
    assert len(headings) == 1 + len(releases()), f"headings that are not a release: {headings}"
    found = releases()
    assert found, "no release"
    assert found == sorted(found, reverse=True), "releases are not newest first"


def test_the_newest_release_is_the_version_everywhere():
    newest = ".".join(str(n) for n in releases()[0][0])
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert pyproject == newest, "pyproject.toml's version is not the changelog's newest release"
    assert __version__ == newest
    assert get_provider_info()["versions"] == [newest]
    assert metadata.version("airflow-provider-synclane") == newest


def test_every_migration_the_package_ships_is_in_the_changelog():
    migrations = sorted(path.stem for path in (REPO / "synclane_provider/core/db/migrations").glob("[0-9]*.sql"))
    assert migrations, "no migrations found"
    assert [name for name in migrations if f"`{name}`" not in CHANGELOG] == []
