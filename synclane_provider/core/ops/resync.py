"""A re-sync request made: the range checked, cut into windows for each owner, and recorded with its jobs in one
statement (see :mod:`~synclane_provider.core.plan.resync` for the windows, ``insert_resync`` in queries.sql for
why a key makes it idempotent)."""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone

from synclane_provider.core.db.store import Store
from synclane_provider.core.declare.declarations import JobType, Owner, Queue, WindowedType, checked_name
from synclane_provider.core.declare.owners import listed_owner, owners_of
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.plan.resync import MAX_JOBS, checked_range, resync_key, resync_priority, resync_windows
from synclane_provider.core.plan.rule import History, history_of, instant_text
from synclane_provider.core.records import ResyncRequest, ResyncWindows
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
    dry_run: bool = False,
) -> ResyncRequest:
    """What :meth:`Operations.resync <synclane_provider.core.ops.operations.Operations.resync>` does; with
    ``dry_run``, everything but the insert: the request as it would be made, with its windows, and nothing made."""
    queue = declared.name
    job_type = declared.job_type(type)
    start, end = checked_range(start, end)
    checked_name("reason", reason)
    if by is not None:
        checked_name("by", by)
    key = checked_name("key", key) if key is not None else uuid.uuid4().hex[:16]
    listed = owners_of(declared) if owners is None else [listed_owner(declared, owner) for owner in owners]
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
    cut = _windows_by_owner(store, declared, job_type, start, end, listed)
    jobs = sum(max(len(group.windows), 1) * len(group.owners) for group in cut)
    if jobs > MAX_JOBS:
        windows = max(len(group.windows) for group in cut)
        raise DeclarationError(
            f"a re-sync of {len(listed)} owner(s) x up to {windows} window(s) of {type!r} would make "
            f"{jobs} jobs, more than {MAX_JOBS}: ask for a shorter range or fewer owners"
        )
    asked = (type, start, end, None if owners is None else tuple(owner.id for owner in listed))
    if dry_run:
        recorded = store.resync_request(queue, key)
        if recorded is not None:
            _same_request(queue, key, asked, recorded)
            return recorded
        return ResyncRequest(
            queue, key, type, start, end, asked[3], reason, by, now or datetime.now(timezone.utc), jobs, windows=cut
        )
    windows_of: dict[str, Sequence[tuple[datetime | None, datetime | None]]] = {
        name: group.windows or [(None, None)] for group in cut for name in group.owners
    }
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
            for window_start, window_end in windows_of[owner.id]
        ]
    )
    request = store.insert_resync(
        queue=queue,
        key=key,
        rows_json=rows,
        type=type,
        window_start=start,
        window_end=end,
        owners=None if asked[3] is None else list(asked[3]),
        reason=reason,
        requested_by=by,
        mode=JobMode.MANUAL.value,
        priority=resync_priority(declared.priority_of(type)),
        jobs=jobs,
        now=now,
    )
    _same_request(queue, key, asked, request)
    if not request.made:
        return request
    store.notify(queue)
    log.info("queue %s: re-sync %s of %s made %s job(s): %s", queue, key, type, request.made, reason)
    return dataclasses.replace(request, windows=cut)


def _windows_by_owner(
    store: Store, declared: Queue, job_type: JobType, start: datetime, end: datetime, owners: Sequence[Owner]
) -> tuple[ResyncWindows, ...]:
    """The windows of each of ``owners``, cut where its history is (its coverage read in one statement), the owners
    with the same windows together, in the order of their first owner."""
    windowed = isinstance(job_type, WindowedType)
    coverage = store.coverage_of(declared.name, job_type.name, [o.id for o in owners]) if windowed else {}
    by_history: dict[History | None, list[str]] = {}
    for owner in owners:
        found = coverage.get(owner.id)
        by_history.setdefault(history_of(found) if found is not None else None, []).append(owner.id)
    by_windows: dict[tuple[tuple[datetime, datetime], ...], list[str]] = {}
    for history, names in by_history.items():
        by_windows.setdefault(resync_windows(job_type, start, end, history), []).extend(names)
    return tuple(ResyncWindows(tuple(names), windows) for windows, names in by_windows.items())


def _same_request(
    queue: str, key: str, asked: tuple[str, datetime, datetime, tuple[str, ...] | None], recorded: ResyncRequest
) -> None:
    """Refuses a key recorded for another type, range or owners than ``asked``, naming both."""
    found = (recorded.type, recorded.window_start, recorded.window_end, recorded.owners)
    if asked != found:
        raise DeclarationError(
            f"re-sync key {key!r} of queue {queue!r} was used for {_described(*found)}; "
            f"this call asks for {_described(*asked)}: give another key"
        )


def _described(type: str, start: datetime, end: datetime, owners: tuple[str, ...] | None) -> str:
    who = "every owner" if owners is None else "owner(s) " + ", ".join(owners)
    return f"{type} [{instant_text(start)}, {instant_text(end)}) of {who}"
