"""Whether a queue needs a person: the health check's findings, and the planning run's gauges.

What a person must hear about, because nothing in the engine will fix it by itself (a :class:`Problem` each):

* a job **abandoned** since the last check (it waits for a requeue);
* a running job whose heartbeat is older than its lease: its worker is **stuck** (a page that hangs) or gone
  and no worker has taken the job over;
* an owner **lagging**: the end of its newest completed planned window of a windowed type (a manual job's
  never counts, see ``Operations.freshness``) is further behind now than the queue's ``max_lag``;
* a **stuck window**: a job abandoned again after ``STUCK_AFTER_REQUEUES`` requeues (said once, instead of
  its abandonment, by the check that sees it);
* an owner **paused** by its handler (it raised ``OwnerPaused``: its token is gone) or because its credentials
  need reconnecting (``CredentialsNeedReconnecting``), or turned **failing** (its
  attempts kept failing): reported once per event, not on every check while it lasts -- the check claims the
  event on the owner's row (``alerted_at``, ``alerted_for``) in the statement that finds it. A check claims at
  most ``MAX_FINDINGS`` of them, among those not alerted yet, says that more are left, and leaves them to the
  next check. A check that names itself (``claimant``) is told its own claims again when it runs a second
  time: Airflow may run a check's task again after a try whose failure it never recorded, and that alert must
  not be lost with the first try.

The check keeps no state of its own: "since the last check" is a time range the caller passes (the Airflow
operator passes its run's data interval), matched against the moment each job was abandoned, which the row
holds in ``next_run_at`` (see ``abandoned_between`` in queries.sql).

Retention never deletes initial jobs, and records how far the windows it deletes reached on the owner's coverage
row, so an owner is measured by its newest completed window whether or not that job is still kept.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.declarations import Queue
from synclane_provider.core.declare.owners import owners_of
from synclane_provider.core.durations import duration_text
from synclane_provider.core.metrics import (
    OWNERS_BEHIND,
    OWNERS_DEGRADED,
    OWNERS_FAILING,
    OWNERS_HEALTHY,
    OWNERS_PAUSED,
    QUEUE_ABANDONED,
    QUEUE_MAX_LAG,
    QUEUE_RUNNING,
    QUEUE_WAITING,
    Metrics,
)
from synclane_provider.core.records import PAUSED_BY_CREDENTIALS, PAUSED_BY_HANDLER, Freshness, Job, OwnerState
from synclane_provider.core.states import OwnerCondition, owner_condition

STUCK_AFTER_REQUEUES = 3
"""A window abandoned again after this many requeues is a stuck window: said once, by the check that sees that
abandonment (its next abandonments are plain abandonments again)."""
MAX_FINDINGS = 50
"""Findings of each kind a check reports at most; more are summed up in one line (the message stays readable)."""


class Problem(StrEnum):
    ABANDONED = "abandoned"
    STUCK = "stuck"
    LAGGING = "lagging"
    PAUSED = "paused"
    FAILING = "failing"
    STUCK_WINDOW = "stuck window"


@dataclass(frozen=True)
class Finding:
    """One thing wrong: what, whose, which job (if one), and a sentence for the alert."""

    problem: Problem
    owner: str
    message: str
    job_id: int | None = None


@dataclass(frozen=True)
class HealthReport:
    """What one check of a queue found; ``more`` counts findings of a kind beyond :data:`MAX_FINDINGS`."""

    queue: str
    findings: tuple[Finding, ...]
    more: dict[Problem, bool]

    @property
    def healthy(self) -> bool:
        return not self.findings

    def describe(self) -> str:
        """The alert: a first line saying how many problems, then one line per finding."""
        if self.healthy:
            return f"queue {self.queue}: healthy"
        lines = [f"queue {self.queue}: {len(self.findings)} problem(s)"]
        lines += [f"- {finding.message}" for finding in self.findings]
        lines += [_more(problem) for problem, more in self.more.items() if more]
        return "\n".join(lines)


def _more(problem: Problem) -> str:
    """The line saying that findings of a kind were left out; owners in trouble left out are the next check's."""
    if problem in (Problem.PAUSED, Problem.FAILING):
        return f"- … and more {problem} owners beyond the first {MAX_FINDINGS}: the next check reports them"
    return f"- … and more {problem} beyond the first {MAX_FINDINGS}"


def _abandoned(job: Job) -> Finding:
    return Finding(
        Problem.ABANDONED,
        job.owner,
        f"abandoned: owner {job.owner}, job {job.describe()}, at cursor {job.cursor!r} after "
        f"{job.attempt_count} attempt(s): {job.error or 'no error recorded'}",
        job.id,
    )


def _stuck_window(job: Job) -> Finding:
    return Finding(
        Problem.STUCK_WINDOW,
        job.owner,
        f"stuck window: owner {job.owner}, job {job.describe()}, abandoned again at cursor {job.cursor!r} after "
        f"{STUCK_AFTER_REQUEUES} requeues: {job.error or 'no error recorded'}; requeuing it again will not help",
        job.id,
    )


def _stuck(job: Job, lease: timedelta) -> Finding:
    heartbeat = f"{job.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC" if job.heartbeat_at else "never"
    return Finding(
        Problem.STUCK,
        job.owner,
        f"stuck: owner {job.owner}, job {job.describe()}, running on {job.leased_by} at cursor {job.cursor!r}, "
        f"last heartbeat {heartbeat}, longer ago than its lease ({duration_text(lease)}): the worker hangs or is gone",
        job.id,
    )


def _lagging(row: Freshness, max_lag: timedelta) -> Finding:
    return Finding(
        Problem.LAGGING,
        row.owner,
        f"lagging: owner {row.owner} is {duration_text(row.lag)} behind in {row.type} (newest completed window ends "
        f"{row.fresh_until:%Y-%m-%d %H:%M} UTC), more than max_lag ({duration_text(max_lag)})",
    )


def _owner_in_trouble(state: OwnerState) -> Finding:
    last_error = state.last_error or "no error recorded"
    if state.paused and state.paused_by == PAUSED_BY_CREDENTIALS:
        return Finding(
            Problem.PAUSED,
            state.owner,
            f"paused: owner {state.owner} {state.paused_reason} (paused at {state.paused_at:%Y-%m-%d %H:%M} UTC); "
            f"last error: {last_error}; none of its jobs runs until its credentials are set again "
            f"(airflow synclane credentials set {state.owner})",
        )
    if state.paused and state.paused_by == PAUSED_BY_HANDLER:
        return Finding(
            Problem.PAUSED,
            state.owner,
            f"paused: owner {state.owner} was paused by its handler at {state.paused_at:%Y-%m-%d %H:%M} UTC: "
            f"{state.paused_reason}; last error: {last_error}; none of its jobs runs until it is resumed",
        )
    since = f" since {state.failing_since:%Y-%m-%d %H:%M} UTC" if state.failing_since else ""
    return Finding(
        Problem.FAILING,
        state.owner,
        f"failing: owner {state.owner} is failing{since} after {state.consecutive_failures} failed attempt(s) in a "
        f"row; last error: {last_error}",
    )


def check(
    store: Store,
    queue: Queue,
    *,
    abandoned_since: datetime | None,
    abandoned_until: datetime | None = None,
    now: datetime | None = None,
    claimant: str | None = None,
) -> HealthReport:
    """Check ``queue``: jobs abandoned in ``[abandoned_since, abandoned_until)`` (None: no bound), stuck
    workers, owners paused by their handler or turned failing since the last alert about them (each such event
    is claimed here, so it is reported once; again to the same ``claimant``), and, when the queue declares
    ``max_lag``, owners listed by its owner source that lag more."""
    more: dict[Problem, bool] = {}
    abandoned = store.abandoned_between(
        queue.name, since=abandoned_since, until=abandoned_until, limit=MAX_FINDINGS + 1
    )
    more[Problem.ABANDONED] = len(abandoned) > MAX_FINDINGS
    stuck = store.stuck_running(queue.name, lease=queue.lease, now=now, limit=MAX_FINDINGS + 1)
    more[Problem.STUCK] = len(stuck) > MAX_FINDINGS
    lagging: list[Freshness] = []
    if queue.max_lag is not None:
        owners = [owner.id for owner in owners_of(queue)]
        lagging = store.window_lags(
            queue.name, owners, queue.windowed_types, over=queue.max_lag, limit=MAX_FINDINGS + 1, now=now
        )
        more[Problem.LAGGING] = len(lagging) > MAX_FINDINGS
    alerts = store.claim_owner_alerts(queue.name, limit=MAX_FINDINGS, now=now, claimant=claimant)
    more[Problem.PAUSED] = alerts.more_paused > 0  # left unclaimed: the next check reports them
    more[Problem.FAILING] = alerts.more_failing > 0
    findings = [
        _stuck_window(job) if requeues == STUCK_AFTER_REQUEUES else _abandoned(job)
        for job, requeues in abandoned[:MAX_FINDINGS]
    ]
    findings += [_owner_in_trouble(state) for state in alerts.claimed]
    findings += [_stuck(job, queue.lease) for job in stuck[:MAX_FINDINGS]]
    if queue.max_lag is not None:
        findings += [_lagging(row, queue.max_lag) for row in lagging[:MAX_FINDINGS]]
    return HealthReport(queue.name, tuple(findings), more)


@dataclass(frozen=True)
class QueueGauges:
    """A queue at one moment: jobs waiting, running, abandoned, its most-behind owner's freshness lag, and its
    listed owners by condition (:class:`~synclane_provider.core.states.OwnerCondition`): each owner the source
    lists is counted once, so the five add up to the owners listed."""

    queue: str
    waiting: int
    running: int
    abandoned: int
    max_freshness_lag: timedelta | None
    """None when no listed owner has completed a window yet (or the queue has no windowed type)."""
    owners_healthy: int = 0
    owners_degraded: int = 0
    owners_failing: int = 0
    owners_paused: int = 0
    owners_behind: int = 0

    @property
    def owners(self) -> dict[OwnerCondition, int]:
        """The listed owners by condition, worst first."""
        return {
            OwnerCondition.PAUSED: self.owners_paused,
            OwnerCondition.FAILING: self.owners_failing,
            OwnerCondition.DEGRADED: self.owners_degraded,
            OwnerCondition.BEHIND: self.owners_behind,
            OwnerCondition.HEALTHY: self.owners_healthy,
        }

    def describe_owners(self) -> str:
        """``owners 4 healthy, 1 behind, 0 degraded, 0 failing, 1 paused (6 listed)``: for the planning log."""
        counts = self.owners
        order = (OwnerCondition.HEALTHY, OwnerCondition.BEHIND, OwnerCondition.DEGRADED, OwnerCondition.FAILING)
        parts = [f"{counts[c]} {c.value}" for c in (*order, OwnerCondition.PAUSED)]
        return f"owners {', '.join(parts)} ({sum(counts.values())} listed)"

    def emit(self, metrics: Metrics) -> None:
        tags = {"queue": self.queue}
        metrics.gauge(QUEUE_WAITING, tags, self.waiting)
        metrics.gauge(QUEUE_RUNNING, tags, self.running)
        metrics.gauge(QUEUE_ABANDONED, tags, self.abandoned)
        lag = self.max_freshness_lag.total_seconds() if self.max_freshness_lag is not None else 0.0
        metrics.gauge(QUEUE_MAX_LAG, tags, max(lag, 0.0))
        metrics.gauge(OWNERS_HEALTHY, tags, self.owners_healthy)
        metrics.gauge(OWNERS_DEGRADED, tags, self.owners_degraded)
        metrics.gauge(OWNERS_FAILING, tags, self.owners_failing)
        metrics.gauge(OWNERS_PAUSED, tags, self.owners_paused)
        metrics.gauge(OWNERS_BEHIND, tags, self.owners_behind)


def gauges(store: Store, queue: Queue, *, now: datetime | None = None) -> QueueGauges:
    """Read the queue's gauges. The owners are the ones its owner source lists now, each in one condition (an
    owner dropped from the source keeps its row, which must neither hide nor count as a listed one)."""
    counts = store.queue_counts(queue.name)
    owners = [owner.id for owner in owners_of(queue)]
    lag = None
    behind: set[str] = set()
    if queue.windowed_types:
        lags = store.window_lags(queue.name, owners, queue.windowed_types, over=None, limit=1, now=now)
        lag = lags[0].lag if lags else None
        if queue.max_lag is not None and lag is not None and lag > queue.max_lag:
            over = store.window_lags(
                queue.name,
                owners,
                queue.windowed_types,
                over=queue.max_lag,
                limit=len(owners) * len(queue.windowed_types),
                now=now,
            )
            behind = {row.owner for row in over}
    noted = store.noted_owners(queue.name, owners)
    tally: Counter[OwnerCondition] = Counter()
    for owner in owners:
        paused, health, abandoned = noted.get(owner, (False, "healthy", False))
        tally[owner_condition(paused=paused, health=health, abandoned=abandoned, behind=owner in behind)] += 1
    return QueueGauges(
        queue.name,
        counts.waiting,
        counts.running,
        counts.abandoned,
        lag,
        owners_healthy=tally[OwnerCondition.HEALTHY],
        owners_degraded=tally[OwnerCondition.DEGRADED],
        owners_failing=tally[OwnerCondition.FAILING],
        owners_paused=tally[OwnerCondition.PAUSED],
        owners_behind=tally[OwnerCondition.BEHIND],
    )
