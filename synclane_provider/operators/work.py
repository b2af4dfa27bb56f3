"""The worker operator: runs a queue's jobs one at a time, and waits for more on a trigger instead of a worker slot."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import conf
from airflow.sdk.exceptions import AirflowException

from synclane_provider.assets import alias, emit_arrivals
from synclane_provider.configured import credentials_sealer
from synclane_provider.core import Summary, SyncLane, WorkerSlot
from synclane_provider.core.durations import duration_text, parse_duration
from synclane_provider.core.run.arrivals import Arrivals
from synclane_provider.core.run.multislot import MultiSlot
from synclane_provider.core.run.slot import new_worker_id
from synclane_provider.core.run.tokens import TokenSource
from synclane_provider.hooks.oauth import oauth_client
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.operators.base import QueueOperator
from synclane_provider.stats import AirflowStats
from synclane_provider.triggers.due import JobDueTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

DEFER_GRACE = timedelta(minutes=1)
"""How much longer than the trigger's own deadline the deferral may last before Airflow calls it a timeout."""
LINGER = timedelta(minutes=2)
"""How long a slot waits in its own process, listening, after its last job (or its start) before it defers."""
SETTLE = timedelta(seconds=10)
"""How long after a deferral its trigger yields nothing: the deferring try's exit has been processed by then."""
STOP_CHECK_SECONDS = 0.5
"""Longest time a lingering slot takes to notice that it was stopped."""


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def _jobs_per_slot(value: object) -> int:
    """``jobs_per_slot`` as given to the operator (a DAG param renders it as text): a whole number of at least 1."""
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"jobs_per_slot must be a whole number of at least 1, got {value!r}")
    return int(text)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class WorkState:
    """What a worker task carries across deferrals: when it started, when it last ran a job, and its totals.

    It travels inside the trigger's event (not the task's resume kwargs), so it
    survives every way Airflow resumes a task.
    """

    started_at: datetime
    idle_since: datetime
    summary: Summary = field(default_factory=Summary)
    deferrals: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at.isoformat(),
            "idle_since": self.idle_since.isoformat(),
            "summary": self.summary.as_dict(),
            "arrivals": self.summary.arrivals.as_dict(),
            "deferrals": self.deferrals,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WorkState":
        summary = Summary.from_dict(data["summary"])
        # "landed": its name in a state deferred by the release before (a trigger's event outlives an upgrade)
        summary.arrivals = Arrivals.from_dict(data.get("arrivals", data.get("landed", {})))
        return cls(
            started_at=datetime.fromisoformat(data["started_at"]),
            idle_since=datetime.fromisoformat(data["idle_since"]),
            summary=summary,
            deferrals=int(data["deferrals"]),
        )


class SyncLaneWorkOperator(QueueOperator):
    """One worker slot of a queue: takes and runs jobs until nothing is due, then waits for more.

    Each job is logged on one line (owner, type, window, pages, records,
    outcome), and counted in Airflow's metrics (``synclane.*``, see docs/metrics.md). A job that fails, is throttled or abandoned is recorded on its
    row and never fails the task; a lost database connection is retried with
    backoff, and the task fails only when the database stays unreachable for
    ``give_up_after``.

    When nothing is due in a free lane the task defers (``deferrable=True``)
    to a :class:`~synclane_provider.triggers.due.JobDueTrigger` and frees its
    worker slot until a job is inserted, requeued, handed back or becomes due;
    without deferral it polls every ``poll_interval`` of the declaration.

    A deferral is not free: a try that defers and is resumed within seconds
    meets Airflow's stale executor event (the scheduler processes the exit of
    the deferring try after the resumed try was queued, and fails the resumed
    one: "finished with state success, but the task instance's state attribute
    is queued"). So a slot first *lingers*: for ``linger`` after its last job
    (or after it started or resumed) it waits in its own process for the same
    trigger, listening for NOTIFY and the next due time, and runs what comes
    at once; short gaps between jobs never defer. Only a slot idle for
    ``linger`` defers, and its trigger yields nothing until ``settle`` after the
    deferral, by when the scheduler has processed the deferring try's exit.
    The
    task ends successfully once it has had nothing to do for ``idle_timeout``,
    or after ``max_run_time`` (a job still running then is handed back as
    pending with its cursor after its current page, for the next run). It
    returns its totals (jobs by outcome, pages, records, deferrals), pushed to
    XCom.

    When Airflow stops the task (``on_kill``: SIGTERM, a cleared or
    marked-failed task) the running job is handed back as pending with its
    cursor after the current page, and the task fails. Prefer ``max_run_time``
    to ``execution_timeout``: the latter interrupts a page in flight.

    :param synclane_queue: name of the queue to work (``queue`` is the executor's queue in Airflow).
    :param slot: which concurrency slot this task is (names the worker in ``leased_by`` and the UI);
        map over ``range(queue.concurrency)`` to run every slot.
    :param idle_timeout: end after this long with nothing to do (timedelta or seconds).
    :param max_run_time: end after this long in all (timedelta or seconds).
    :param give_up_after: how long the database may stay unreachable before the task fails.
    :param linger: how long a deferrable slot waits in its own process after its last job before it defers
        (timedelta or seconds; zero: defer at once).
    :param settle: how long after a deferral its trigger yields nothing (timedelta or seconds; zero: none).
    :param jobs_per_slot: how many jobs this slot runs at once, each in a lane of its own, over the queue's
        ``connections`` (None: the queue's ``jobs_per_slot``); a whole number, or a template giving one.
    :param deferrable: wait for work on the triggerer instead of a worker slot; defaults to
        ``[operators] default_deferrable``.
    :param emit_assets: when the task ends, emit one Airflow asset event per job type whose jobs completed
        (``synclane://<schema>/<queue>/<type>``, see :mod:`synclane_provider.assets`), with ``extra`` naming
        the owners, their windows and record counts. Emitted through the outlet ``AssetAlias``
        ``synclane-<queue>``, added to ``outlets`` here, so a run that completed nothing emits nothing. For
        one unmapped worker task only, and not beside a
        :class:`~synclane_provider.operators.asset_events.SyncLaneAssetsOperator` (which announces every
        worker's completions from the table within a plan interval; both would announce each completion).
        Several tasks emitting through one alias at the same moment fail in Airflow 3.3 (both create the
        alias or the asset row: a unique violation that fails the task), and a mapped task's outlets are not
        known when the DAG is parsed.
    (The other parameters are :class:`~synclane_provider.operators.base.QueueOperator`'s.)
    """

    template_fields: Sequence[str] = (
        *QueueOperator.queue_fields,
        "idle_timeout",
        "max_run_time",
        "linger",
        "settle",
        "jobs_per_slot",
    )
    ui_color = "#d9ecf7"

    def __init__(
        self,
        *,
        synclane_queue: str,
        slot: int = 0,
        idle_timeout: timedelta | float | str = timedelta(minutes=10),
        max_run_time: timedelta | float | str = timedelta(hours=1),
        give_up_after: timedelta = timedelta(minutes=5),
        linger: timedelta | float | str = LINGER,
        settle: timedelta | float | str = SETTLE,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        emit_assets: bool = False,
        jobs_per_slot: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("map_index_template", "{{ task.synclane_queue }} slot {{ task.slot }}")
        if emit_assets and not _templated(synclane_queue):
            # Declared when the DAG is parsed: Airflow records events only for a task's declared outlets.
            outlets = kwargs.get("outlets") or []
            kwargs["outlets"] = [*(outlets if isinstance(outlets, list) else [outlets]), alias(synclane_queue)]
        super().__init__(synclane_queue=synclane_queue, **kwargs)
        for name, value in (("idle_timeout", idle_timeout), ("max_run_time", max_run_time)):
            if not _templated(value):
                parse_duration(name, value)  # a bad value fails when the DAG is parsed, not hours later
        for name, value in (("linger", linger), ("settle", settle)):
            if not _templated(value):
                parse_duration(name, value, positive=False)
        if jobs_per_slot is not None and not _templated(jobs_per_slot):
            _jobs_per_slot(jobs_per_slot)  # a bad value fails when the DAG is parsed
        self.jobs_per_slot = jobs_per_slot
        self.slot = slot
        self.idle_timeout = idle_timeout
        self.max_run_time = max_run_time
        self.give_up_after = parse_duration("give_up_after", give_up_after)
        self.linger = linger
        self.settle = settle
        self.deferrable = deferrable
        self.emit_assets = emit_assets
        self._context: Context | None = None
        self._worker: WorkerSlot | MultiSlot | None = None
        self._stop_requested = False

    def execute(self, context: Context) -> dict[str, Any]:
        self._context = context
        now = _utcnow()
        return self._work(WorkState(started_at=now, idle_since=now))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: drain again, or end on the trigger's timeout."""
        self._context = context
        state = WorkState.from_dict(event["carry"])
        status = event.get("status")
        if status == "error":
            raise self._waiting_failed(event)
        if status == "timeout":
            return self._finish(state)
        self.log.info("woken: a job of queue %s can be taken", self.synclane_queue)
        return self._work(state)

    def _waiting_failed(self, event: dict[str, Any]) -> AirflowException:
        return AirflowException(f"waiting for jobs of queue {self.synclane_queue!r} failed: {event.get('message')}")

    def on_kill(self) -> None:
        """Hand the running job back (pending, with its cursor) after its current page. Never blocks.

        Airflow kills the process 5 s after it calls this: a page still running 2 s later is not waited
        for, and the job goes back at the cursor that page started from (see ``WorkerSlot.interrupt``).
        """
        self._stop_requested = True
        worker = self._worker
        if worker is not None:
            worker.interrupt()
        self.log.warning("stop requested: the running job, if any, is handed back after its current page")

    def _work(self, state: WorkState) -> dict[str, Any]:
        declaration, queue = self.located()
        idle_timeout = parse_duration("idle_timeout", self.idle_timeout)
        linger = parse_duration("linger", self.linger, positive=False)
        settle = parse_duration("settle", self.settle, positive=False)
        run_until = state.started_at + parse_duration("max_run_time", self.max_run_time)
        resumed_at = _utcnow()
        database = SyncLaneHook(synclane_conn_id=self.synclane_conn_id).get_database(declaration)
        # The process's one source of owners' credentials: the key they are sealed with, the queue's OAuth client.
        tokens = TokenSource(database, credentials_sealer(), oauth_client(queue), skew=queue.credentials_skew)
        jobs = queue.jobs_per_slot if self.jobs_per_slot is None else _jobs_per_slot(self.jobs_per_slot)
        worker: WorkerSlot | MultiSlot
        if jobs == 1:
            worker = WorkerSlot(
                declaration,
                database,
                queue.name,
                worker_id=new_worker_id(f"{queue.name}-{self.slot}"),
                logger=self.log,
                give_up_after=self.give_up_after,
                metrics=AirflowStats(),
                tokens=tokens,
            )
        else:
            worker = MultiSlot(
                declaration,
                database,
                queue.name,
                jobs_per_slot=jobs,
                worker_id=new_worker_id(f"{queue.name}-{self.slot}"),
                logger=self.log,
                give_up_after=self.give_up_after,
                metrics=AirflowStats(),
                tokens=tokens,
            )
        self._worker = worker
        self.log.info(
            "worker %s of queue %s runs %s",
            worker.worker_id,
            queue.name,
            "one job at a time"
            if isinstance(worker, WorkerSlot)
            else f"up to {jobs} jobs at once, each in a lane of its own, over {worker.connections.size} connections",
        )
        if self._stop_requested:
            worker.interrupt()
        # At the end of the run time a job in flight is handed back after its current page.
        timer = threading.Timer(max((run_until - _utcnow()).total_seconds(), 0), worker.stop.set)
        timer.daemon = True
        timer.start()
        try:
            while True:
                ran = worker.drain().jobs
                state.summary.merge(worker.summary)
                worker.summary = Summary()
                now = _utcnow()
                if ran:
                    state.idle_since = now
                if self._stop_requested:
                    raise AirflowException(
                        f"worker {worker.worker_id} stopped by Airflow; its running job (if any) was handed back "
                        "as pending with its cursor"
                    )
                idle_until = state.idle_since + idle_timeout
                if worker.stop.is_set() or now >= run_until or now >= idle_until:
                    return self._finish(state)
                until = min(run_until, idle_until)
                if not self.deferrable:
                    worker.stop.wait(min(declaration.poll_interval, until - now).total_seconds())
                    continue
                linger_until = min(max(state.idle_since, resumed_at) + linger, until)
                if now < linger_until:
                    # Short gaps between jobs are waited out here: no deferral, so no resume to race with.
                    self.log.info(
                        "nothing to take in queue %s: waiting here for a job until %s, then %s",
                        queue.name,
                        linger_until.isoformat(timespec="seconds"),
                        "ending" if linger_until >= until else "deferring",
                    )
                    self._linger(self._trigger(declaration, queue.name, state, linger_until), worker.stop)
                    continue
                state.deferrals += 1
                self.log.info(
                    "nothing to take in queue %s for %s: deferring until a job is due, at the latest %s",
                    queue.name,
                    duration_text(linger),
                    until.isoformat(timespec="seconds"),
                )
                self.defer(
                    trigger=self._trigger(declaration, queue.name, state, until, settle_until=now + settle),
                    method_name="execute_complete",
                    timeout=until - now + settle + DEFER_GRACE,
                )
        finally:
            timer.cancel()
            worker.close()
            tokens.close()
            self._worker = None

    def _trigger(
        self,
        declaration: SyncLane,
        queue: str,
        state: WorkState,
        until: datetime,
        *,
        settle_until: datetime | None = None,
    ) -> JobDueTrigger:
        return JobDueTrigger(
            synclane_conn_id=self.synclane_conn_id,
            schema=declaration.schema,
            queue=queue,
            until=until,
            poll_interval=declaration.poll_interval.total_seconds(),
            give_up_after=self.give_up_after.total_seconds(),
            carry=state.as_dict(),
            settle_until=settle_until,
        )

    def _linger(self, trigger: JobDueTrigger, stop: threading.Event) -> None:
        """Wait in this process for ``trigger``'s event (a job can be taken, or its deadline), or a stop."""

        async def first_event() -> None:
            waiting = asyncio.ensure_future(anext(aiter(trigger.run())))
            try:
                while not stop.is_set():
                    done, _ = await asyncio.wait({waiting}, timeout=STOP_CHECK_SECONDS)
                    if done:
                        break
            finally:
                if not waiting.done():
                    waiting.cancel()
                    await asyncio.gather(waiting, return_exceptions=True)
            if waiting.done() and not waiting.cancelled():
                event = waiting.result().payload
                if event.get("status") == "error":
                    raise self._waiting_failed(event)

        asyncio.run(first_event())

    def _finish(self, state: WorkState) -> dict[str, Any]:
        now = _utcnow()
        run_until = state.started_at + parse_duration("max_run_time", self.max_run_time)
        reason = "max_run_time" if now >= run_until else "idle_timeout"
        totals = state.summary.as_dict()
        self.log.info(
            "queue %s slot %s done (%s) after %.0fs: %s job(s) (%s completed, %s failed, %s deferred, %s abandoned, "
            "%s handed back, %s paused with their owner), %s page(s), %s record(s), waited on the triggerer %s time(s)",
            self.synclane_queue,
            self.slot,
            reason,
            (now - state.started_at).total_seconds(),
            totals["jobs"],
            totals["completed"],
            totals["failed"],
            totals["deferred"],
            totals["abandoned"],
            totals["released"],
            totals["paused"],
            totals["pages"],
            totals["records"],
            state.deferrals,
        )
        self._emit_assets(state.summary.arrivals)
        return {
            "queue": self.synclane_queue,
            "slot": self.slot,
            **totals,
            "deferrals": state.deferrals,
            "ended": reason,
            "arrivals": state.summary.arrivals.as_dict(),
        }

    def _emit_assets(self, arrivals: Arrivals) -> None:
        """One asset event per type whose jobs completed in this run, its ``extra`` naming owners and windows."""
        if self.emit_assets and self._context is not None:
            emit_arrivals(self._context, self.declaration, self.synclane_queue, arrivals, self.log)
