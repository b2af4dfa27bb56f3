"""Finding the user's declaration from an import path, so that operators take only serializable arguments.

Operators and sensors are given ``declaration="package.module:attribute"`` and a
queue name instead of the objects themselves: Airflow serializes operator
arguments, and a declaration holds handlers (functions) that do not serialize.
"""

from __future__ import annotations

import importlib
import warnings

from synclane_provider.core import DeclarationError, Queue, SyncLane, UnknownQueueError


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
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DeclarationError(f"cannot import module {module_name!r} of declaration={path!r}: {exc}") from exc
    target: object = module
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
    if declaration is not None:
        return declaration
    from synclane_provider.configured import declaration_path

    return declaration_path()
