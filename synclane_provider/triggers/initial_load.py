"""The initial-load sensor's trigger: fires when the given owners' first loads are complete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from synclane_provider.core.db.watch import TableWatch
from synclane_provider.triggers.base import TableTrigger

MAX_OWNER_BYTES = 16_000
"""The most owner ids, in UTF-8 bytes, one trigger carries: its kwargs are stored in Airflow's database and
sent to the triggerer, so they must not grow with the number of owners. A sensor waiting for more owners
waits for them a part at a time (see :func:`first_part`)."""


def first_part(owners: Sequence[str], budget: int | None = None) -> list[str]:
    """The first of ``owners`` that fit in ``budget`` bytes (``MAX_OWNER_BYTES``; at least one, whatever its
    size: an id is at most 512 bytes)."""
    budget = MAX_OWNER_BYTES if budget is None else budget
    part: list[str] = []
    used = 0
    for owner in owners:
        size = len(owner.encode("utf-8")) + 4  # quotes, comma, space in the serialized list
        if part and used + size > budget:
            break
        part.append(owner)
        used += size
    return part


class InitialLoadTrigger(TableTrigger):
    """Polls until every one of ``owners`` has its initial jobs (of ``job_type``, or of every type) completed.

    An owner with nothing initial planned yet is not complete. With
    ``settled`` an abandoned initial job counts as done. Writes nothing;
    yields ``{"status": "success"}`` or ``{"status": "error", "message": ...}``.

    The owners it carries are bounded (``MAX_OWNER_BYTES``); ``more`` says how many others the sensor still
    waits for after these, and comes back in the event so that the sensor looks at them next.

    :param owners: owner ids to wait for, at most ``MAX_OWNER_BYTES`` of them.
    :param job_type: one job type, or None for every type.
    :param settled: count abandoned initial jobs as done.
    :param more: how many owners besides these the sensor waits for (it looks again when this fires).
    (The other parameters are :class:`TableTrigger`'s.)
    """

    def __init__(
        self,
        *,
        owners: list[str],
        job_type: str | None = None,
        settled: bool = False,
        more: int = 0,
        poll_interval: float = 60.0,
        **table: Any,
    ) -> None:
        super().__init__(poll_interval=poll_interval, **table)
        self.owners = list(owners)
        if len(first_part(self.owners)) < len(self.owners):
            raise ValueError(
                f"a trigger carries at most {MAX_OWNER_BYTES} bytes of owner ids, got {len(self.owners)} owners; "
                "give it first_part(owners) and the number of the others as more="
            )
        self.job_type = job_type
        self.settled = settled
        self.more = int(more)

    def own_kwargs(self) -> dict[str, Any]:
        return {"owners": self.owners, "job_type": self.job_type, "settled": self.settled, "more": self.more}

    def event_context(self) -> dict[str, Any]:
        return {"queue": self.queue, "owners": len(self.owners), "more": self.more}

    async def look(self, watch: TableWatch) -> tuple[dict[str, Any] | None, float]:
        waiting = await watch.owners_still_loading(self.owners, type=self.job_type, settled=self.settled)
        if not waiting:
            return {"status": "success"}, 0.0
        return None, self.poll_interval
