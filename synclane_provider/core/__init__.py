"""The SyncLane engine: one jobs table, a repeatable planner, exclusive lanes, leased jobs with cursors.

This package imports nothing from Airflow; the Airflow adapters around it are thin.
"""

from synclane_provider.core.clock import PinnedClock
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.declare.declarations import Owner, Queue, SnapshotType, SyncLane, WindowedType
from synclane_provider.core.declare.ratelimit import Rate
from synclane_provider.core.declare.retry import Jitter, RetryPolicy
from synclane_provider.core.declare.retry_after import parse_retry_after
from synclane_provider.core.errors import (
    DatabaseUnavailableError,
    DeclarationError,
    HandlerResultError,
    JobAbandoned,
    JobThrottled,
    LeaseLostError,
    MigrationPrivilegeError,
    OwnerSourceError,
    SchemaNotReadyError,
    SyncLaneError,
    UnknownJobTypeError,
    UnknownOwnerError,
    UnknownQueueError,
    WorkerLost,
)
from synclane_provider.core.ops.operations import Operations
from synclane_provider.core.plan.planner import PlanSummary
from synclane_provider.core.plan.retention import Pruned
from synclane_provider.core.records import Activity, Cancelled, Job, Page, Progress
from synclane_provider.core.run.runner import Outcome, RunResult
from synclane_provider.core.run.worker import Summary, WorkerPool, WorkerSlot
from synclane_provider.core.states import JobMode, JobStatus

__all__ = [
    "Activity",
    "Cancelled",
    "Database",
    "DatabaseUnavailableError",
    "DeclarationError",
    "HandlerResultError",
    "Job",
    "JobAbandoned",
    "JobMode",
    "JobStatus",
    "JobThrottled",
    "Jitter",
    "LeaseLostError",
    "MigrationPrivilegeError",
    "Operations",
    "Outcome",
    "Owner",
    "OwnerSourceError",
    "Page",
    "PinnedClock",
    "PlanSummary",
    "Progress",
    "Pruned",
    "Queue",
    "Rate",
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
