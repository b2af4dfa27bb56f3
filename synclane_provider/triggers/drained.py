"""The drained sensor's trigger: fires when a queue (or one lane of it) has nothing due and nothing running."""

from __future__ import annotations

from typing import Any

from synclane_provider.core.db.watch import TableWatch
from synclane_provider.triggers.base import TableTrigger


class DrainedTrigger(TableTrigger):
    """Polls until no job of ``queue`` (of ``lane``, if given) is running or due.

    Jobs waiting for a later ``next_run_at`` (a retry in an hour, the next
    recurring window) do not keep a queue from being drained. Writes nothing;
    yields ``{"status": "success"}`` or ``{"status": "error", "message": ...}``.

    :param lane: one lane of the queue, or None for the whole queue.
    (The other parameters are :class:`TableTrigger`'s.)
    """

    def __init__(self, *, lane: str | None = None, poll_interval: float = 60.0, **table: Any) -> None:
        super().__init__(poll_interval=poll_interval, **table)
        self.lane = lane

    def own_kwargs(self) -> dict[str, Any]:
        return {"lane": self.lane}

    def event_context(self) -> dict[str, Any]:
        return {"queue": self.queue, "lane": self.lane}

    async def look(self, watch: TableWatch) -> tuple[dict[str, Any] | None, float]:
        if (await watch.activity(lane=self.lane)).drained:
            return {"status": "success"}, 0.0
        return None, self.poll_interval
