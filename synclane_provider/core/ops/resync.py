"""A re-sync request made: the range checked, cut into windows for each owner, and recorded with its jobs in one
statement (see :mod:`~synclane_provider.core.plan.resync` for the windows, ``insert_resync`` in queries.sql for
why a key makes it idempotent)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from datetime import datetime

from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.declarations import Queue, checked_name
from synclane_provider.core.declare.owners import owners_of, resolve_owner
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.plan.resync import MAX_JOBS, checked_range, resync_key, resync_priority, resync_windows
from synclane_provider.core.plan.rule import instant_text
from synclane_provider.core.records import ResyncRequest
from synclane_provider.core.states import JobMode

log = logging.getLogger(__name__)


def request(
    store: Store,
    declared: Queue,
    type: str,
    start: datetime,
    end: datetime,
    *,
    owners: Sequence[str] | None,
    reason: str,
    key: str | None,
    by: str | None,
    now: datetime | None,
) -> ResyncRequest:
    """What :meth:`Operations.resync <synclane_provider.core.ops.operations.Operations.resync>` does."""
    queue = declared.name
    job_type = declared.job_type(type)
    windows: Sequence[tuple[datetime | None, datetime | None]] = resync_windows(job_type, start, end) or [(None, None)]
    start, end = checked_range(start, end)
    checked_name("reason", reason)
    if by is not None:
        checked_name("by", by)
    key = checked_name("key", key) if key is not None else uuid.uuid4().hex[:16]
    listed = owners_of(declared) if owners is None else [resolve_owner(declared, owner) for owner in owners]
    paused = store.paused_among(queue, [owner.id for owner in listed])
    if paused and owners is not None:
        raise DeclarationError(
            f"owner(s) of queue {queue!r} paused, whose re-sync would not run: "
            + ", ".join(f"{name!r} ({why or 'no reason given'})" for name, why in paused.items())
            + "; resume them first"
        )
    listed = [owner for owner in listed if owner.id not in paused]  # every owner: the paused ones left out
    if not listed:
        raise DeclarationError(f"a re-sync of queue {queue!r} needs owners: its owner source lists none not paused")
    if len(listed) * len(windows) > MAX_JOBS:
        raise DeclarationError(
            f"a re-sync of {len(listed)} owner(s) x {len(windows)} window(s) of {type!r} would make "
            f"{len(listed) * len(windows)} jobs, more than {MAX_JOBS}: ask for a shorter range or fewer owners"
        )
    rows = json.dumps(
        [
            {
                "owner": owner.id,
                "lane": owner.lane_or_id,
                "lane_width": owner.lane_width,
                "window_start": window_start.isoformat() if window_start is not None else None,
                "window_end": window_end.isoformat() if window_end is not None else None,
                "dedup_key": resync_key(key, window_start),
            }
            for owner in listed
            for window_start, window_end in windows
        ]
    )
    request = store.insert_resync(
        queue=queue,
        key=key,
        rows_json=rows,
        type=type,
        window_start=start,
        window_end=end,
        owners=None if owners is None else [owner.id for owner in listed],
        reason=reason,
        requested_by=by,
        mode=JobMode.MANUAL.value,
        priority=resync_priority(declared.priority_of(type)),
        jobs=len(listed) * len(windows),
        now=now,
    )
    asked = (type, start, end, None if owners is None else tuple(owner.id for owner in listed))
    recorded = (request.type, request.window_start, request.window_end, request.owners)
    if asked != recorded:
        raise DeclarationError(
            f"re-sync key {key!r} of queue {queue!r} was used for {_described(*recorded)}; "
            f"this call asks for {_described(*asked)}: give another key"
        )
    if request.made:
        store.notify(queue)
        log.info("queue %s: re-sync %s of %s made %s job(s): %s", queue, key, type, request.made, reason)
    return request


def _described(type: str, start: datetime, end: datetime, owners: tuple[str, ...] | None) -> str:
    who = "every owner" if owners is None else "owner(s) " + ", ".join(owners)
    return f"{type} [{instant_text(start)}, {instant_text(end)}) of {who}"
