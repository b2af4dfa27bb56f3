"""Which declaration and connection the operator's tools use: ``[synclane]`` in Airflow's configuration.

The page and ``airflow synclane`` run outside any DAG, so they cannot be handed a declaration the way an
operator is: they read ``[synclane] declaration`` (``package.module:attribute``; else
``$SYNCLANE_DECLARATION``, what the example DAGs read) and ``[synclane] conn_id`` (default
``synclane_default``). A command's ``--declaration`` and ``--conn-id`` win over both.
"""

from __future__ import annotations

import os
import threading
import warnings
from datetime import timedelta

from synclane_provider.core import DeclarationError, Operations, SyncLane
from synclane_provider.core.credentials import Sealer
from synclane_provider.locate import locate_synclane

SECTION = "synclane"
DEFAULT_CONN_ID = "synclane_default"
DECLARATION_VARIABLE = "SYNCLANE_DECLARATION"
QUEUE_VARIABLE = "SYNCLANE_QUEUE"


def declaration_path(given: str | None = None, *, default: str | None = None) -> str:
    """The import path of the declaration: ``given``, else ``[synclane] declaration``, else the variable,
    else ``default`` (the example DAGs fall back to the example declaration)."""
    from airflow.configuration import conf

    path = given or conf.get(SECTION, "declaration", fallback=None) or os.environ.get(DECLARATION_VARIABLE) or default
    if not path:
        raise DeclarationError(
            "no SyncLane declaration configured: set [synclane] declaration = package.module:attribute in "
            f"airflow.cfg (or AIRFLOW__SYNCLANE__DECLARATION, or ${DECLARATION_VARIABLE}), or pass --declaration"
        )
    return path


def declaration_argument(declaration: str | None, synclane: str | None = None) -> str:
    """The import path an operator or sensor was given: ``declaration=``, or the older ``synclane=`` (kept
    for one release, with a deprecation warning), else ``[synclane] declaration`` from Airflow's configuration.

    ``synclane=`` was renamed because ``SyncLane`` is the declaration object itself, while the argument holds
    its import path.
    """
    if synclane is not None:
        from airflow.exceptions import AirflowProviderDeprecationWarning

        warnings.warn(
            "the synclane= argument is deprecated and will be removed in the next release: use declaration=",
            AirflowProviderDeprecationWarning,
            stacklevel=3,
        )
        if declaration is not None and declaration != synclane:
            raise DeclarationError(
                f"give declaration= or the deprecated synclane=, not both ({declaration!r}, {synclane!r})"
            )
        return synclane
    return declaration if declaration is not None else declaration_path()


def queue_name(given: str | None = None, *, default: str | None = None) -> str:
    """The queue the example DAGs work: ``given``, else ``[synclane] queue``, else the variable, else ``default``."""
    from airflow.configuration import conf

    name = given or conf.get(SECTION, "queue", fallback=None) or os.environ.get(QUEUE_VARIABLE) or default
    if not name:
        raise DeclarationError(
            f"no SyncLane queue configured: set [synclane] queue in airflow.cfg (or AIRFLOW__SYNCLANE__QUEUE, or "
            f"${QUEUE_VARIABLE})"
        )
    return name


def conn_id(given: str | None = None) -> str:
    from airflow.configuration import conf

    return given or conf.get(SECTION, "conn_id", fallback=None) or DEFAULT_CONN_ID


IMPATIENT = timedelta(seconds=5)
"""How long a command line waits for an unreachable database (the page waits as long as workers, minutes)."""


def open_operations(
    declaration: str | None = None, connection: str | None = None, *, migrate: bool = True, patient: bool = True
) -> Operations:
    """New :class:`Operations` on the configured declaration and connection; the caller closes it.

    ``migrate=False`` (``airflow synclane``): a schema that is missing or behind is refused with
    :class:`~synclane_provider.core.errors.SchemaNotReadyError`, never created or upgraded, whatever the
    declaration's ``create_schema`` says. ``patient=False``: an unreachable database is given up after
    :data:`IMPATIENT`, and a connection the server turns down (no such database, a refused login) at once.
    """
    from synclane_provider.hooks.synclane import SyncLaneHook

    synclane: SyncLane = locate_synclane(declaration_path(declaration))
    database = SyncLaneHook(synclane_conn_id=conn_id(connection)).get_database(synclane)
    database.create_schema = database.create_schema and migrate
    if patient:
        return Operations(synclane, database, sealer=credentials_sealer())
    return Operations(synclane, database, sealer=credentials_sealer(), give_up_after=IMPATIENT, wait_out_refusals=False)


CREDENTIALS_KEY_NAMED = "[synclane] credentials_key (AIRFLOW__SYNCLANE__CREDENTIALS_KEY) or [core] fernet_key"
"""Where the key of owners' credentials is read, as an error that finds none says it."""


def credentials_sealer() -> Sealer:
    """What encrypts owners' credentials: ``[synclane] credentials_key``, else Airflow's ``[core] fernet_key``
    (the key Airflow encrypts its own connections with). Neither set is an error only when credentials are used."""
    from airflow.configuration import conf

    key = conf.get(SECTION, "credentials_key", fallback=None) or conf.get("core", "fernet_key", fallback=None)
    return Sealer(key or None, named=CREDENTIALS_KEY_NAMED)


_shared: dict[tuple[str, str], Operations] = {}
_shared_lock = threading.Lock()


def shared_operations() -> Operations:
    """One :class:`Operations` per configured declaration and connection for a long-lived process (the API
    server): its session serializes the calls of concurrent requests on one connection, reopened when it
    breaks, instead of a connection per request."""
    key = (declaration_path(), conn_id())
    with _shared_lock:
        if key not in _shared:
            _shared[key] = open_operations(*key)
        return _shared[key]
