"""The idle worker's trigger: wakes its task when a job of the queue can be taken, or at its deadline."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from synclane_provider.triggers.base import TableTrigger
from synclane_provider.core.watch import TableWatch


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

    :param until: aware datetime at which to give up waiting (the worker's idle or run deadline).
    :param carry: JSON-serializable state handed back in the event.
    (The other parameters are :class:`TableTrigger`'s.)
    """

    listens = True

    def __init__(self, *, until: datetime, carry: dict[str, Any] | None = None, **table: Any) -> None:
        super().__init__(**table)
        if until.tzinfo is None:
            raise ValueError(f"until must be timezone-aware, got {until!r}")
        self.until = until
        self.carry = carry or {}

    def own_kwargs(self) -> dict[str, Any]:
        return {"until": self.until, "carry": self.carry}

    def event_context(self) -> dict[str, Any]:
        return {"queue": self.queue, "carry": self.carry}

    async def look(self, watch: TableWatch) -> tuple[dict[str, Any] | None, float]:
        state = await watch.wakeup()
        if state.takeable:
            return {"status": "due"}, 0.0
        left = (self.until - datetime.now(timezone.utc)).total_seconds()
        if left <= 0:
            return {"status": "timeout"}, 0.0
        sleep = min(left, self.poll_interval)
        if state.wake_at is not None:
            sleep = min(sleep, (state.wake_at - state.now) / timedelta(seconds=1))
        return None, sleep
