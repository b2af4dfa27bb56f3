"""The one test of a whole number given by a caller: declarations, handlers' results, limits and budgets.

``True`` is an ``int`` to Python but never a count here, so every check refuses booleans. Each caller raises
its own error, worded for what the number is.
"""

from __future__ import annotations

from typing import TypeGuard


def whole(value: object, minimum: int, maximum: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` (not a ``bool``) from ``minimum`` to ``maximum`` (no upper bound: None).

    >>> whole(3, 1), whole(0, 1), whole(True, 0), whole(2.0, 1), whole(501, 1, 500)
    (True, False, False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return value >= minimum and (maximum is None or value <= maximum)
