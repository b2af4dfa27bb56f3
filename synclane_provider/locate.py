"""Finding the user's declaration from an import path, so that operators take only serializable arguments.

Operators and sensors are given ``synclane="package.module:attribute"`` and a
queue name instead of the objects themselves: Airflow serializes operator
arguments, and a declaration holds handlers (functions) that do not serialize.
"""

from __future__ import annotations

import importlib

from synclane_provider.core import DeclarationError, Queue, SyncLane, UnknownQueueError


def locate_synclane(path: str) -> SyncLane:
    """Import ``"package.module:attribute"`` and return the :class:`SyncLane` it names.

    Every way this can go wrong raises a :class:`DeclarationError` that names
    the path, so a typo in a DAG file is a one-line fix.
    """
    if not isinstance(path, str) or path.count(":") != 1:
        raise DeclarationError(f"synclane must be an import path like 'package.module:attribute', got {path!r}")
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise DeclarationError(f"synclane must be an import path like 'package.module:attribute', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DeclarationError(f"cannot import module {module_name!r} of synclane={path!r}: {exc}") from exc
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise DeclarationError(f"module {module_name!r} has no attribute {attribute!r} (synclane={path!r})") from None
    if not isinstance(target, SyncLane):
        raise DeclarationError(
            f"synclane={path!r} names a {type(target).__name__}, expected a SyncLane declaration"
        )
    return target


def locate_queue(path: str, queue: str) -> tuple[SyncLane, Queue]:
    """The declaration at ``path`` and its queue called ``queue`` (an unknown name lists the declared ones)."""
    synclane = locate_synclane(path)
    try:
        return synclane, synclane.queue(queue)
    except UnknownQueueError as exc:
        raise UnknownQueueError(f"{exc} in synclane={path!r}") from None
