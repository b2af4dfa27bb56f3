"""The idle worker's trigger: wakes its task when a job of the queue can be taken, or at its deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.triggers.base import TriggerEvent

from synclane_provider.core.db.wakeups import waiter_key
from synclane_provider.core.db.watch import TableWatch
from synclane_provider.triggers.base import TableTrigger


class JobDueTrigger(TableTrigger):
    """Waits until a take would find a job of ``queue`` (a due job in a free lane, or an expired lease).

    Woken by LISTEN/NOTIFY when jobs are inserted, requeued or handed back, by
    the earliest ``next_run_at`` (or lease expiry) of the queue, and at least
    every ``poll_interval`` seconds as a safety net for changes made by hand.
    It writes nothing. It yields one event:

    * ``{"status": "due"}`` - a job can be taken now;
    * ``{"status": "timeout"}`` - ``until`` passed with nothing to take;
    * ``{"status": "error", "message": ...}`` - the database stayed unreachable.

    Every event carries ``carry`` back unchanged: the worker's loop state
    (totals, start time), which must survive the deferral whatever the
    runtime does with the task's own resume kwargs.

    The idle workers of a queue take turns: with k jobs to take, the k
    first of them in line wake (see ``worker_wakeup``), so one NOTIFY wakes
    one worker per job, not every worker (a waiter whose look comes after
    the one ahead of it has left and before that one's worker took the job
    wakes too: the line holds no writes). A waiter further back that sees
    jobs left untaken for ``patience`` seconds per place it is behind wakes
    anyway, so a worker ahead of it that is slow to resume (or stuck) costs a
    delay, never a job left waiting.

    With ``settle_until`` it yields nothing before that instant, whatever it
    finds: it starts watching only then. A worker defers with the instant its
    deferral has settled in Airflow (see ``settle`` of
    :class:`~synclane_provider.operators.work.SyncLaneWorkOperator`): a resume
    that comes before the scheduler has processed the executor's report of the
    deferring try would be failed by it.

    :param until: aware datetime at which to give up waiting (the worker's idle or run deadline).
    :param carry: JSON-serializable state handed back in the event.
    :param patience: seconds a waiter lets the ones ahead of it take a job; None: ``poll_interval``.
    :param settle_until: aware datetime before which no event is yielded; None: events as soon as found.
    (The other parameters are :class:`TableTrigger`'s.)
    """

    listens = True

    def __init__(
        self,
        *,
        until: datetime,
        carry: dict[str, Any] | None = None,
        patience: float | None = None,
        settle_until: datetime | None = None,
        **table: Any,
    ) -> None:
        super().__init__(**table)
        for name, instant in (("until", until), ("settle_until", settle_until)):
            if instant is not None and instant.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware, got {instant!r}")
        self.until = until
        self.settle_until = settle_until
        self.carry = carry or {}
        self.patience = float(patience) if patience is not None else None
        self._behind_since: float | None = None

    def own_kwargs(self) -> dict[str, Any]:
        return {"until": self.until, "carry": self.carry, "patience": self.patience, "settle_until": self.settle_until}

    def waiter(self) -> tuple[int, int] | None:
        return waiter_key(self.schema, self.queue)

    def event_context(self) -> dict[str, Any]:
        return {"queue": self.queue, "carry": self.carry}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.settle_until is not None:
            # Not even a look before the deferral has settled: nothing found now could be reported yet.
            await asyncio.sleep(max((self.settle_until - datetime.now(timezone.utc)).total_seconds(), 0.0))
        async for event in super().run():
            yield event

    async def look(self, watch: TableWatch) -> tuple[dict[str, Any] | None, float]:
        state = await watch.wakeup()
        if state.takeable:
            return {"status": "due"}, 0.0
        left = (self.until - datetime.now(timezone.utc)).total_seconds()
        if left <= 0:
            return {"status": "timeout"}, 0.0
        sleep = min(left, self.poll_interval)
        if state.behind:
            # Jobs wait, and others are ahead in line for them; wake anyway if they leave them waiting.
            now = time.monotonic()
            self._behind_since = self._behind_since if self._behind_since is not None else now
            allowed = (self.patience if self.patience is not None else self.poll_interval) * state.behind
            if now - self._behind_since >= allowed:
                self.log.info(
                    "jobs of queue %s left waiting for %.1fs by the workers ahead; waking", self.queue, allowed
                )
                return {"status": "due"}, 0.0
            sleep = min(sleep, allowed - (now - self._behind_since))
        else:
            self._behind_since = None
        if state.wake_at is not None:
            sleep = min(sleep, (state.wake_at - state.now) / timedelta(seconds=1))
        return None, sleep
