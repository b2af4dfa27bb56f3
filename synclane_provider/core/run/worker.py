"""Worker slots and the pool, by their earlier address: the names live in ``slot``, ``pool``, ``summary``
and ``taking``.

Kept so that ``from synclane_provider.core.run.worker import WorkerSlot`` (and the other names) goes on working.
"""

from synclane_provider.core.run.pool import MIN_IDLE_SECONDS, WorkerPool
from synclane_provider.core.run.slot import WORKER_SETTINGS, WorkerSlot, new_worker_id, worker_settings
from synclane_provider.core.run.summary import Summary
from synclane_provider.core.run.taking import LANE_INDEX, MAX_LANE_RACES

__all__ = [
    "LANE_INDEX",
    "MAX_LANE_RACES",
    "MIN_IDLE_SECONDS",
    "WORKER_SETTINGS",
    "Summary",
    "WorkerPool",
    "WorkerSlot",
    "new_worker_id",
    "worker_settings",
]
