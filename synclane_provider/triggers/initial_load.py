"""The initial-load sensor's trigger: fires when the given owners' first loads are complete."""

from __future__ import annotations

from typing import Any

from synclane_provider.triggers.base import TableTrigger
from synclane_provider.core.watch import TableWatch


class InitialLoadTrigger(TableTrigger):
    """Polls until every one of ``owners`` has its initial jobs (of ``job_type``, or of every type) completed.

    An owner with nothing initial planned yet is not complete. With
    ``settled`` an abandoned initial job counts as done. Writes nothing;
    yields ``{"status": "success"}`` or ``{"status": "error", "message": ...}``.

    :param owners: owner ids to wait for.
    :param job_type: one job type, or None for every type.
    :param settled: count abandoned initial jobs as done.
    (The other parameters are :class:`TableTrigger`'s.)
    """

    def __init__(
        self,
        *,
        owners: list[str],
        job_type: str | None = None,
        settled: bool = False,
        poll_interval: float = 60.0,
        **table: Any,
    ) -> None:
        super().__init__(poll_interval=poll_interval, **table)
        self.owners = list(owners)
        self.job_type = job_type
        self.settled = settled

    def own_kwargs(self) -> dict[str, Any]:
        return {"owners": self.owners, "job_type": self.job_type, "settled": self.settled}

    def event_context(self) -> dict[str, Any]:
        return {"queue": self.queue, "owners": len(self.owners)}

    async def look(self, watch: TableWatch) -> tuple[dict[str, Any] | None, float]:
        waiting = await watch.owners_still_loading(self.owners, type=self.job_type, settled=self.settled)
        if not waiting:
            return {"status": "success"}, 0.0
        return None, self.poll_interval
