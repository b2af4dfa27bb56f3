"""The SyncLane engine: one jobs table, a repeatable planner, exclusive lanes, leased jobs with cursors.

This package imports nothing from Airflow; the Airflow adapters around it are thin. Its public names are
imported when first used, so ``synclane_provider.core.states`` (or any one module) can be used without
importing the worker and psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synclane_provider.core.clock import PinnedClock
    from synclane_provider.core.db.database import Database, Session
    from synclane_provider.core.declare.declarations import Owner, Queue, SnapshotType, SyncLane, WindowedType
    from synclane_provider.core.declare.ratelimit import Rate
    from synclane_provider.core.declare.retry import Jitter, RetryPolicy
    from synclane_provider.core.declare.retry_after import parse_retry_after
    from synclane_provider.core.declare.stretch import OwnerBackoff, OwnerStretch
    from synclane_provider.core.errors import (
        DatabaseUnavailableError,
        DeclarationError,
        DeletionsRefused,
        HandlerResultError,
        JobAbandoned,
        JobThrottled,
        LandingError,
        LeaseLostError,
        MigrationPrivilegeError,
        OwnerPaused,
        OwnerSourceError,
        SchemaNotReadyError,
        SyncLaneError,
        UnknownJobTypeError,
        UnknownOwnerError,
        UnknownQueueError,
        WorkerLost,
    )
    from synclane_provider.core.land.destination import Destination
    from synclane_provider.core.ops.operations import Operations
    from synclane_provider.core.page_context import PageContext, PageJob
    from synclane_provider.core.plan.planner import PlanSummary
    from synclane_provider.core.plan.retention import Pruned
    from synclane_provider.core.rate_headers import RateNews
    from synclane_provider.core.records import Activity, Cancelled, Job, LandCounts, Page, Progress, ResyncRequest
    from synclane_provider.core.run.pool import WorkerPool
    from synclane_provider.core.run.runner import Outcome, RunResult
    from synclane_provider.core.run.slot import WorkerSlot
    from synclane_provider.core.run.summary import Summary
    from synclane_provider.core.states import JobMode, JobStatus

_HOMES = {
    "Activity": "synclane_provider.core.records",
    "Cancelled": "synclane_provider.core.records",
    "Database": "synclane_provider.core.db.database",
    "DatabaseUnavailableError": "synclane_provider.core.errors",
    "DeclarationError": "synclane_provider.core.errors",
    "DeletionsRefused": "synclane_provider.core.errors",
    "Destination": "synclane_provider.core.land.destination",
    "HandlerResultError": "synclane_provider.core.errors",
    "Jitter": "synclane_provider.core.declare.retry",
    "Job": "synclane_provider.core.records",
    "JobAbandoned": "synclane_provider.core.errors",
    "JobMode": "synclane_provider.core.states",
    "JobStatus": "synclane_provider.core.states",
    "JobThrottled": "synclane_provider.core.errors",
    "LandCounts": "synclane_provider.core.records",
    "LandingError": "synclane_provider.core.errors",
    "LeaseLostError": "synclane_provider.core.errors",
    "MigrationPrivilegeError": "synclane_provider.core.errors",
    "Operations": "synclane_provider.core.ops.operations",
    "Outcome": "synclane_provider.core.run.runner",
    "Owner": "synclane_provider.core.declare.declarations",
    "OwnerBackoff": "synclane_provider.core.declare.stretch",
    "OwnerPaused": "synclane_provider.core.errors",
    "OwnerSourceError": "synclane_provider.core.errors",
    "OwnerStretch": "synclane_provider.core.declare.stretch",
    "Page": "synclane_provider.core.records",
    "PageContext": "synclane_provider.core.page_context",
    "PageJob": "synclane_provider.core.page_context",
    "PinnedClock": "synclane_provider.core.clock",
    "PlanSummary": "synclane_provider.core.plan.planner",
    "Progress": "synclane_provider.core.records",
    "Pruned": "synclane_provider.core.plan.retention",
    "ResyncRequest": "synclane_provider.core.records",
    "Queue": "synclane_provider.core.declare.declarations",
    "Rate": "synclane_provider.core.declare.ratelimit",
    "RateNews": "synclane_provider.core.rate_headers",
    "RetryPolicy": "synclane_provider.core.declare.retry",
    "RunResult": "synclane_provider.core.run.runner",
    "SchemaNotReadyError": "synclane_provider.core.errors",
    "Session": "synclane_provider.core.db.database",
    "SnapshotType": "synclane_provider.core.declare.declarations",
    "Summary": "synclane_provider.core.run.summary",
    "SyncLane": "synclane_provider.core.declare.declarations",
    "SyncLaneError": "synclane_provider.core.errors",
    "UnknownJobTypeError": "synclane_provider.core.errors",
    "UnknownOwnerError": "synclane_provider.core.errors",
    "UnknownQueueError": "synclane_provider.core.errors",
    "WindowedType": "synclane_provider.core.declare.declarations",
    "WorkerLost": "synclane_provider.core.errors",
    "WorkerPool": "synclane_provider.core.run.pool",
    "WorkerSlot": "synclane_provider.core.run.slot",
    "parse_retry_after": "synclane_provider.core.declare.retry_after",
}
"""Where each public name lives."""


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "Activity",
    "Cancelled",
    "Database",
    "DatabaseUnavailableError",
    "DeclarationError",
    "DeletionsRefused",
    "Destination",
    "HandlerResultError",
    "Job",
    "JobAbandoned",
    "JobMode",
    "JobStatus",
    "JobThrottled",
    "Jitter",
    "LandCounts",
    "LandingError",
    "LeaseLostError",
    "MigrationPrivilegeError",
    "Operations",
    "Outcome",
    "Owner",
    "OwnerBackoff",
    "OwnerPaused",
    "OwnerSourceError",
    "OwnerStretch",
    "Page",
    "PageContext",
    "PageJob",
    "PinnedClock",
    "PlanSummary",
    "Progress",
    "Pruned",
    "Queue",
    "Rate",
    "RateNews",
    "ResyncRequest",
    "RetryPolicy",
    "RunResult",
    "SchemaNotReadyError",
    "Session",
    "SnapshotType",
    "Summary",
    "SyncLane",
    "SyncLaneError",
    "UnknownJobTypeError",
    "UnknownOwnerError",
    "UnknownQueueError",
    "WindowedType",
    "WorkerPool",
    "WorkerLost",
    "WorkerSlot",
    "parse_retry_after",
]
