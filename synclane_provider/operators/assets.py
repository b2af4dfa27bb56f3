"""The former name of :mod:`synclane_provider.operators.asset_events`, kept as an alias.

DAG files written for an earlier release import ``synclane_provider.operators.assets.SyncLaneAssetsOperator``;
this module names the same class, so they still import.
"""

from __future__ import annotations

from synclane_provider.operators.asset_events import SyncLaneAssetsOperator

__all__ = ["SyncLaneAssetsOperator"]
