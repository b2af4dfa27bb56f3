"""A declaration is found wherever the DAG processor and the workers find it, in every process that asks:
on the Python path (installed packages, ``PYTHONPATH``), in the DAG folder, in a local DAG bundle's folder;
and when it is nowhere, the error names every place searched, in order."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from synclane_provider.core import DeclarationError
from synclane_provider.locate import dag_folders, locate_synclane

pytestmark = pytest.mark.airflow

DECLARATION = """
from datetime import timedelta
from synclane_provider.core import Page, Queue, SnapshotType, SyncLane

synclane = SyncLane(
    queues=[Queue("{queue}", owners=lambda queue: ["acme"],
                  types=[SnapshotType("products", lambda job: Page(None, 0), every=timedelta(hours=1))])]
)
"""


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """A DAG folder and a local bundle's folder of this test's own; the import path and modules restored after."""
    dags, bundle = tmp_path / "dags", tmp_path / "bundle"
    dags.mkdir()
    bundle.mkdir()
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv(
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST",
        json.dumps(
            [
                {
                    "name": "dags-folder",
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {},
                },
                {
                    "name": "team-a",
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {"path": str(bundle)},
                },
                {"name": "remote", "classpath": "airflow.providers.git.bundles.git.GitDagBundle", "kwargs": {}},
            ]
        ),
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield dags, bundle
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def write(folder: Path, module: str, queue: str) -> None:
    (folder / f"{module}.py").write_text(DECLARATION.format(queue=queue), encoding="utf-8")


def test_a_module_in_the_dag_folder_is_found(folders):
    dags, _ = folders
    write(dags, "shop_sync_in_dags", "from-dags")
    assert locate_synclane("shop_sync_in_dags:synclane").queues[0].name == "from-dags"


def test_a_module_in_a_local_bundle_folder_is_found(folders):
    _, bundle = folders
    write(bundle, "shop_sync_in_bundle", "from-bundle")
    assert locate_synclane("shop_sync_in_bundle:synclane").queues[0].name == "from-bundle"


def test_the_python_path_comes_before_the_dag_folder_and_the_dag_folder_before_a_bundle(folders, tmp_path):
    dags, bundle = folders
    on_path = tmp_path / "pythonpath"
    on_path.mkdir()
    sys.path.insert(0, str(on_path))  # as PYTHONPATH or an installed package puts it
    for folder, queue in ((on_path, "from-path"), (dags, "from-dags"), (bundle, "from-bundle")):
        write(folder, "everywhere_sync", queue)
        write(folder, f"not_on_path_{folder.name}", queue)
    write(dags, "dags_and_bundle_sync", "from-dags")
    write(bundle, "dags_and_bundle_sync", "from-bundle")
    assert locate_synclane("everywhere_sync:synclane").queues[0].name == "from-path"
    assert locate_synclane("dags_and_bundle_sync:synclane").queues[0].name == "from-dags"


def test_the_folders_are_the_dag_folder_then_each_local_bundle_once(folders):
    dags, bundle = folders
    assert dag_folders() == [("the DAG folder", dags), ("DAG bundle 'team-a'", bundle)]


def test_a_module_found_nowhere_names_every_place_searched_in_order(folders):
    dags, bundle = folders
    with pytest.raises(DeclarationError) as error:
        locate_synclane("nowhere_sync:synclane")
    message = str(error.value)
    assert message.startswith(
        "cannot import module 'nowhere_sync' of declaration='nowhere_sync:synclane': No module named 'nowhere_sync'."
        " Searched, in order: "
    )
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    positions = [
        message.index(f"{site_packages} (the Python path)"),
        message.index(f"{dags} (the DAG folder)"),
        message.index(f"{bundle} (DAG bundle 'team-a')"),
    ]
    assert positions == sorted(positions)


def test_a_module_that_fails_on_its_own_import_is_not_reported_as_missing(folders):
    dags, _ = folders
    (dags / "broken_sync.py").write_text("import no_such_dependency_anywhere\n", encoding="utf-8")
    with pytest.raises(DeclarationError) as error:
        locate_synclane("broken_sync:synclane")
    assert str(error.value) == (
        "module 'broken_sync' of declaration='broken_sync:synclane' cannot be imported: "
        "No module named 'no_such_dependency_anywhere'"
    )
    # a module that raises while it runs (a setting missing from the environment) is told the same way
    (dags / "unset_sync.py").write_text("import os\nWAREHOUSE = os.environ['NO_SUCH_SETTING_SET']\n", encoding="utf-8")
    with pytest.raises(DeclarationError) as error:
        locate_synclane("unset_sync:synclane")
    assert str(error.value) == (
        "module 'unset_sync' of declaration='unset_sync:synclane' cannot be imported: KeyError: 'NO_SUCH_SETTING_SET'"
    )
