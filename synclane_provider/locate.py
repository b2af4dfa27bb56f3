"""Finding the user's declaration from an import path, so that operators take only serializable arguments.

Operators and sensors are given ``declaration="package.module:attribute"`` and a
queue name instead of the objects themselves: Airflow serializes operator
arguments, and a declaration holds handlers (functions) that do not serialize.

The module is looked up where the DAG processor and the workers find it, in
every process that asks (the API server's page and ``airflow synclane`` too,
which Airflow gives no DAG folder on their path): first the process's Python
path (``PYTHONPATH``, then the environment's installed packages), then the DAG
folder, then the folder of each local DAG bundle. Airflow appends the DAG
folder and bundle folders to the path when it parses and runs DAGs; so does
:func:`import_path`, so a module found in both places resolves the same way
everywhere.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from synclane_provider.core import DeclarationError, Queue, SyncLane, UnknownQueueError

LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


def dag_folders() -> list[tuple[str, Path]]:
    """The DAG folder (``[core] dags_folder``), then each local DAG bundle's folder in the configured order
    (``[dag_processor] dag_bundle_config_list``; a local bundle without a path is the DAG folder), each once,
    with what it is. Other bundle kinds (git, …) keep versions of their own that only Airflow resolves."""
    from airflow.configuration import conf

    dags = Path(conf.get("core", "dags_folder")).expanduser()
    found = [("the DAG folder", dags)]
    for bundle in conf.getjson("dag_processor", "dag_bundle_config_list", fallback=None) or []:
        if isinstance(bundle, dict) and bundle.get("classpath") == LOCAL_BUNDLE:
            path = (bundle.get("kwargs") or {}).get("path")
            folder = Path(path).expanduser() if path else dags
            if all(folder != known for _, known in found):
                found.append((f"DAG bundle {bundle.get('name')!r}", folder))
    return found


def import_path() -> list[tuple[str, str]]:
    """Append the DAG folder and the local bundle folders to ``sys.path`` (as Airflow does when it parses and
    runs DAGs) and return every existing place a module is searched, in order, each with what it is."""
    folders = dag_folders()
    for _, folder in folders:
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
    names = {str(folder): what for what, folder in folders}
    places = []
    for entry in sys.path:
        place = entry or str(Path.cwd())
        if Path(place).exists():
            places.append((names.get(entry, "the Python path"), place))
    return places


def _import(module_name: str, path: str) -> object:
    """The declaration's module; when it is nowhere, the error names every place searched."""
    places = import_path()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(missing + "."):
            raise DeclarationError(f"module {module_name!r} of declaration={path!r} cannot be imported: {exc}") from exc
        searched = "; ".join(f"{place} ({what})" for what, place in places)
        raise DeclarationError(
            f"cannot import module {module_name!r} of declaration={path!r}: {exc}. Searched, in order: {searched}"
        ) from exc
    except ImportError as exc:
        raise DeclarationError(f"module {module_name!r} of declaration={path!r} cannot be imported: {exc}") from exc
    except Exception as exc:  # raised while the module ran: a setting missing from the environment, a typo
        raise DeclarationError(
            f"module {module_name!r} of declaration={path!r} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc


def locate_synclane(path: str) -> SyncLane:
    """Import ``"package.module:attribute"`` and return the :class:`SyncLane` it names.

    Every way this can go wrong raises a :class:`DeclarationError` that names
    the path, so a typo in a DAG file is a one-line fix.
    """
    if not isinstance(path, str) or path.count(":") != 1:
        raise DeclarationError(f"declaration must be an import path like 'package.module:attribute', got {path!r}")
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise DeclarationError(f"declaration must be an import path like 'package.module:attribute', got {path!r}")
    target = _import(module_name, path)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise DeclarationError(
                f"module {module_name!r} has no attribute {attribute!r} (declaration={path!r})"
            ) from None
    if not isinstance(target, SyncLane):
        raise DeclarationError(f"declaration={path!r} names a {type(target).__name__}, expected a SyncLane declaration")
    return target


def locate_queue(path: str, queue: str) -> tuple[SyncLane, Queue]:
    """The declaration at ``path`` and its queue called ``queue`` (an unknown name lists the declared ones)."""
    synclane = locate_synclane(path)
    try:
        return synclane, synclane.queue(queue)
    except UnknownQueueError as exc:
        raise UnknownQueueError(f"{exc} in declaration={path!r}") from None
