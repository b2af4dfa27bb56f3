"""What each ``airflow synclane`` command does: one :class:`Monitor` or :class:`Operations` call, printed the way
Airflow prints (``--output table|json|yaml|plain``). The page, the requeue DAG and these commands share
those calls; nothing here changes the table by itself.
"""

from __future__ import annotations

import getpass
import logging
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from synclane_provider.configured import IMPATIENT, conn_id, declaration_path, open_operations
from synclane_provider.core import DeclarationError, Operations, SyncLaneError
from synclane_provider.core.credentials import Credentials, CredentialState
from synclane_provider.core.db import database as database_module
from synclane_provider.core.db.transient import connect_failure, refused
from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import DatabaseUnavailableError, SchemaNotReadyError
from synclane_provider.core.ops.monitor import Lane, Monitor, OwnerSummary, RunningJob, plain
from synclane_provider.core.records import PAUSED_BY_CREDENTIALS, ResyncProgress, ResyncRequest


def _connections_as_airflow_commands_find_them() -> None:
    """Look connections up in every source Airflow's own commands use: the environment, the metadata database
    (``airflow connections add``) and the configured secrets backends, in Airflow's order.

    Outside a task, Airflow's connection lookup leaves the metadata database out unless the process says it
    is a server process; ``airflow connections get`` and ``test`` say so the same way before they look.
    """
    os.environ["_AIRFLOW_PROCESS_CONTEXT"] = "server"


@contextmanager
def _operations(args: Any) -> Iterator[Operations]:
    """The configured operations, closed afterwards; a refusal by the engine ends the command with its message.

    A command never creates or upgrades the jobs table's schema (a wrong connection would put it in the wrong
    database): a schema missing or behind ends it with one line naming the database and ``schema apply``. It
    waits seconds, not a worker's minutes, for an unreachable database, and none for one that refuses it.
    """
    _connections_as_airflow_commands_find_them()
    verbose = getattr(args, "verbose", False)
    try:
        with _connection_found(), _retries_unlogged(unless=verbose):
            with open_operations(args.declaration, args.conn_id, migrate=False, patient=False) as operations:
                yield operations
    except SchemaNotReadyError as exc:
        sys.exit(_schema_not_ready(exc, args))
    except DatabaseUnavailableError as exc:
        sys.exit(_unreachable(exc, args))
    except (SyncLaneError, ValueError) as exc:
        sys.exit(f"synclane: {exc}")
    except Exception as exc:  # the user's code (an owner source, a handler's import) or the database failed
        if verbose:
            raise
        sys.exit(f"synclane: {_command_name(args)} failed: {type(exc).__name__}: {exc} (-v shows the traceback)")


def _command_name(args: Any) -> str:
    return str(getattr(getattr(args, "func", None), "__name__", "command")).removesuffix("_command")


@contextmanager
def _retries_unlogged(*, unless: bool) -> Iterator[None]:
    """The sessions' "retrying in …" warnings left out: a command gives up within seconds and then says why
    in one line (``-v`` shows them)."""
    log = logging.getLogger(database_module.__name__)
    before = log.level
    if not unless:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(before)


def _same_target(args: Any) -> str:
    """The ``--conn-id`` and ``--declaration`` the command was given, to repeat in the command it suggests."""
    given = [("--conn-id", args.conn_id), ("--declaration", args.declaration)]
    return "".join(f" {option} {shlex.quote(value)}" for option, value in given if value)


def _schema_not_ready(exc: SchemaNotReadyError, args: Any) -> str:
    """One line: which schema of which database is missing or behind, and the command that brings it up to date."""
    status = exc.status
    if status is None or (status.missing_tables and not status.pending):
        return f"synclane: {exc}"
    if status.pending and not status.version_table and not status.jobs_table:
        state, verb = "has no jobs table", "creates"
    elif status.pending and not status.version_table:
        state, verb = "holds a jobs table that records no version (made by 0.1.0)", "upgrades"
    elif status.pending:
        state, verb = f"is at version {status.version}, this SyncLane needs {status.pending[-1].version}", "upgrades"
    else:
        state, verb = f"lacks the index(es) {', '.join(status.missing_indexes)}", "re-creates"
    return (
        f'synclane: schema "{status.schema}" in database {status.database} {state}; `airflow synclane '
        f"{_command_name(args)}` changes no schema: `airflow synclane schema apply{_same_target(args)}` {verb} it "
        f"(so does the planner DAG's next run)"
    )


def _unreachable(exc: DatabaseUnavailableError, args: Any) -> str:
    """One line: the database (name, host, port, user; never the password) and why it could not be used."""
    cause = exc.__cause__
    if cause is None:
        return f"synclane: {exc}"
    target = f"(connection {conn_id(args.conn_id)!r})"
    if refused(cause):
        return f"synclane: the database refused the connection: {connect_failure(cause)} {target}"
    return f"synclane: database unreachable for {duration_text(IMPATIENT)}: {connect_failure(cause)} {target}"


@contextmanager
def _connection_found() -> Iterator[None]:
    """A connection found nowhere ends the command with one line saying where it was looked for."""
    from airflow.exceptions import AirflowNotFoundException

    try:
        yield
    except AirflowNotFoundException as exc:
        sys.exit(f"synclane: {exc} in the environment, the metadata database or a secrets backend (--conn-id)")


NARROW_JOB = (
    "id",
    "owner",
    "lane",
    "type",
    "mode",
    "status",
    "window_start",
    "window_end",
    "cursor",
    "processed_count",
    "landed",
    "attempt_count",
    "next_run_at",
    "error",
)
"""The job columns ``jobs`` prints as a table (``landed``: its counts of rows inserted, updated, unchanged, stale and
deleted that are not zero); json and yaml give the whole row, the five ``*_count`` columns among them."""


def _queue(operations: Operations, args: Any) -> str:
    if getattr(args, "queue", None):
        return str(args.queue)
    names = [queue.name for queue in operations.synclane.queues]
    if len(names) != 1:
        raise DeclarationError(f"the declaration has queues {', '.join(names)}: name one with --queue")
    return names[0]


def _print(rows: list[dict[str, Any]], args: Any, *, next_page: str | None = None, hint: str = "") -> None:
    from airflow.cli.simple_table import AirflowConsole

    AirflowConsole().print_as(data=rows, output=args.output)
    if next_page is not None:  # on stderr, so that json and yaml on stdout stay parseable
        print(f"more: {hint} {next_page}", file=sys.stderr)


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested record as one row: ``running.cursor`` becomes ``running_cursor``."""
    row: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            row.update(_flat(value, f"{prefix}{key}_"))
        else:
            row[f"{prefix}{key}"] = value
    return row


def _instant(text: str | None, name: str) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise DeclarationError(
            f"{name} must be an ISO 8601 time, e.g. 2026-11-01T00:00:00+00:00, got {text!r}"
        ) from None


def queues_command(args: Any) -> None:
    with _operations(args) as operations:
        rows = []
        for summary in Monitor(operations).queues():
            data = plain(summary)
            counts = {
                status: f"{count}+" if status in data["more_than"] else count for status, count in data["jobs"].items()
            }
            rows.append(
                {
                    "queue": data["queue"],
                    **counts,
                    "done_last_hour": data["done_last_hour"],
                    "records_last_hour": data["records_last_hour"],
                    "oldest_waiting_age_s": data["oldest_waiting_age"],
                    "owners_paused": data["owners_paused"],
                }
            )
        _print(rows, args)


def jobs_command(args: Any) -> None:
    with _operations(args) as operations:
        page = Monitor(operations).jobs(
            _queue(operations, args),
            owner=args.owner,
            type=args.type,
            status=args.status,
            mode=args.mode,
            before=args.before,
            limit=args.limit,
        )
        rows = [{**plain(job), "held": page.held.get(str(job.id))} for job in page.items]
        if args.output in ("table", "plain"):  # a terminal's width: the columns an operator scans
            for job, row in zip(page.items, rows, strict=True):
                row["landed"] = job.land_counts.brief()
                if row["held"]:  # not overdue: held by a pause
                    row["next_run_at"] = f"held: {row['held']}"
            rows = [{name: row[name] for name in NARROW_JOB} for row in rows]
        _print(rows, args, next_page=page.next, hint="--before")


LANE_RUNNING = (
    "id",
    "owner",
    "type",
    "window_start",
    "window_end",
    "cursor",
    "records",
    "worker",
    "heartbeat_age",
    "slot",
)
"""What ``lanes`` shows of each running job."""


def lanes_command(args: Any) -> None:
    with _operations(args) as operations:
        page = Monitor(operations).lanes(_queue(operations, args), after=args.after, limit=args.limit)
        now, rows = datetime.now(timezone.utc), []
        for lane in page.items:  # a row per running job (a wide lane has several), one for a lane with none
            if _narrow(args):
                rows.extend(_lane_rows(lane, now))
                continue
            data = plain(lane)
            name = data.pop("lane")
            for running in data.pop("running") or [{}]:
                rows.append(_flat({"lane": name, "running": {key: running.get(key) for key in LANE_RUNNING}, **data}))
        _print(rows, args, next_page=page.next, hint="--after")


LANE_COLUMNS = ("lane", "running", "cursor", "records", "waiting", "next", "rate")
"""What ``lanes`` prints of each running job in a terminal (``--wide``, json and yaml: every field)."""

CURSOR_WIDTH = 16
"""A cursor is cut to this many characters in a terminal, so that a row fits 100 columns."""


def _lane_rows(lane: Lane, now: datetime) -> list[dict[str, Any]]:
    """A lane as a terminal shows it, a row per running job: the job and its type, its cursor and records; the
    lane's waiting jobs (those a pause holds said so), when the next one goes or what holds them, and its rate
    (the learnt one when the lane learnt one), as the Lanes view writes them."""
    waiting = f"{lane.waiting} ({lane.held} held)" if lane.held else str(lane.waiting)
    rate = f"{lane.learnt_rate:.3g}/s learnt" if lane.learnt_rate is not None else lane.rate
    runs: list[RunningJob | None] = [*lane.running] or [None]
    return [
        {
            "lane": lane.lane,
            "running": f"#{running.id} {running.type}" if running else "-",
            "cursor": _cut(running.cursor or "-", CURSOR_WIDTH) if running else "-",
            "records": running.records if running else "-",
            "waiting": waiting,
            "next": _lane_next(lane, now),
            "rate": rate,
        }
        for running in runs
    ]


def _lane_next(lane: Lane, now: datetime) -> str:
    """When the lane's next waiting job goes, or what holds the lane's waiting work instead."""
    if lane.quota_until is not None:
        return f"held: lane quota until {lane.quota_until:%H:%M:%S}"
    if lane.throttled_until is not None:
        return f"throttled until {lane.throttled_until:%H:%M:%S}"
    if lane.next_due is None:
        return "held: owner paused" if lane.held else "-"
    due = lane.next_due - now
    return f"in {duration_text(due)}" if due.total_seconds() > 0 else f"overdue {duration_text(-due)}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def progress_command(args: Any) -> None:
    with _operations(args) as operations:
        queue = _queue(operations, args)
        if args.owner:
            done = operations.progress(queue, args.owner, type=args.type)
            _print([{**plain(done), "complete": done.complete, "settled": done.settled}], args)
            return
        page = Monitor(operations).owners(queue, after=args.after, troubled=args.troubled, limit=args.limit)
        rows = [plain(owner) for owner in page.items]
        if _narrow(args):
            rows = [_progress_row(owner) for owner in page.items]
        _print(rows, args, next_page=page.next, hint="--after")


def _narrow(args: Any) -> bool:
    """A table for a terminal: the columns an operator scans fit 100 characters, unless ``--wide``."""
    return args.output in ("table", "plain") and not getattr(args, "wide", False)


PROGRESS_COLUMNS = ("owner", "condition", "first_load", "records", "fresh_until", "lag", "retrying", "stuck")
"""What ``progress`` prints of each owner in a terminal (``--wide``, json and yaml: every field)."""


def _condition(condition: str, paused_by: str | None) -> str:
    """An owner's condition in words: a pause because its credentials need reconnecting says so (the page says
    it too); ``credentials set`` resumes it."""
    return "needs reconnecting" if condition == "paused" and paused_by == PAUSED_BY_CREDENTIALS else condition


def _progress_row(owner: OwnerSummary) -> dict[str, Any]:
    """One owner as ``progress`` shows it in a terminal: its condition, its first load, records stored, how
    fresh, and its jobs retrying and stuck (deferred or abandoned); durations as the page writes them."""
    return {
        "owner": owner.owner,
        "condition": _condition(owner.condition, owner.paused_by),
        "first_load": f"{owner.initial_completed}/{owner.initial_total}{' done' if owner.initial_complete else ''}",
        "records": owner.records,
        "fresh_until": f"{owner.fresh_until:%Y-%m-%d %H:%M}" if owner.fresh_until else "-",
        "lag": duration_text(owner.lag) if owner.lag is not None else "-",
        "retrying": owner.retrying,
        "stuck": owner.deferred + owner.abandoned,
    }


OWNER_COLUMNS = ("owner", "state", "failures", "paused", "reason")
"""What ``owners``, ``pause`` and ``resume`` print of an owner in a terminal (``--wide``, json and yaml: every
field ``progress`` has of it)."""

REASON_WIDTH = 40
"""A pause reason is cut to this many characters in a terminal, so that a row fits 100 columns."""


def _owner_row(owner: OwnerSummary) -> dict[str, Any]:
    """One owner as a terminal shows it: its condition, the one answer the page, ``progress``, the planning log
    line and the gauges give too (``paused`` or ``needs reconnecting`` whenever it is paused, never its health
    beside a pause); failures in a row; when and by whom it was paused, and why, cut to fit."""
    reason = owner.paused_reason or ""
    return {
        "owner": owner.owner,
        "state": _condition(owner.condition, owner.paused_by),
        "failures": owner.consecutive_failures,
        "paused": f"{owner.paused_at:%Y-%m-%d %H:%M} by {owner.paused_by or '?'}" if owner.paused_at else "",
        "reason": _cut(reason, REASON_WIDTH),
    }


def _print_owners(owners: list[OwnerSummary], args: Any, **paging: Any) -> None:
    rows = [_owner_row(owner) for owner in owners] if _narrow(args) else [plain(owner) for owner in owners]
    _print(rows, args, **paging)


def _owner_now(operations: Operations, queue: str, owner: str) -> OwnerSummary:
    """The owner as ``owners`` lists it, after an action on it."""
    [summary] = Monitor(operations).owners(queue, owner=owner).items
    return summary


def plan_command(args: Any) -> None:
    with _operations(args) as operations:
        summary = operations.plan(_queue(operations, args), owner=args.owner)
        _print(
            [
                {
                    "queue": summary.queue,
                    "owners": summary.owners,
                    "inserted": summary.total,
                    **{f"inserted_{name}": count for name, count in summary.inserted.items()},
                    "moved": summary.moved,
                }
            ],
            args,
        )


def enqueue_command(args: Any) -> None:
    with _operations(args) as operations:
        job = operations.enqueue(
            _queue(operations, args),
            args.owner,
            args.type,
            lane=args.lane,
            window_start=_instant(args.window_start, "--window-start"),
            window_end=_instant(args.window_end, "--window-end"),
            key=args.key,
            run_at=_instant(args.run_at, "--run-at"),
        )
        if job is None:
            _print([{"enqueued": 0, "message": "a job with this key exists already: nothing added"}], args)
        else:
            _print([{"enqueued": 1, **plain(job)}], args)


def requeue_command(args: Any) -> None:
    with _operations(args) as operations:
        count = operations.requeue(
            _queue(operations, args),
            owner=args.owner,
            type=args.type,
            job_id=args.job_id,
            force_deletions=args.force_deletions,
        )
        _print([{"requeued": count}], args)


def cancel_command(args: Any) -> None:
    with _operations(args) as operations:
        done = operations.cancel(_queue(operations, args), args.owner, args.reason, type=args.type)
        _print([{"abandoned": done.abandoned, "stopping": done.stopping}], args)


def pause_command(args: Any) -> None:
    with _operations(args) as operations:
        queue, by = _queue(operations, args), args.by or getpass.getuser()
        paused = operations.pause(queue, args.owner, args.reason, by=by)
        _print_owners([_owner_now(operations, queue, paused.owner)], args)


def resume_command(args: Any) -> None:
    with _operations(args) as operations:
        queue = _queue(operations, args)
        resumed = operations.resume(queue, args.owner)
        _print_owners([_owner_now(operations, queue, resumed.owner)], args)


def owners_command(args: Any) -> None:
    with _operations(args) as operations:
        page = Monitor(operations).owners(
            _queue(operations, args), troubled=args.troubled, after=args.after, limit=args.limit
        )
        _print_owners(page.items, args, next_page=page.next, hint="--after")


def _day_or_instant(text: str, name: str) -> datetime:
    """``2026-03-01`` as midnight UTC of that day; anything else as :func:`_instant` reads it."""
    if len(text) == 10:
        try:
            return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    instant = _instant(text, name)
    assert instant is not None
    return instant


def _resync_row(progress: ResyncProgress) -> dict[str, Any]:
    request = progress.request
    return {
        "key": request.key,
        "type": request.type,
        "from": request.window_start.isoformat(),
        "to": request.window_end.isoformat(),
        "owners": ",".join(request.owners) if request.owners is not None else "(all)",
        "done": f"{progress.done}/{progress.total}",
        "running": progress.running,
        "retrying": progress.retrying,
        "failed": progress.stopped,
        "records": progress.records,
        "by": request.requested_by,
        "reason": request.reason,
        "requested_at": request.requested_at.isoformat(),
        "cancelled_at": request.cancelled_at.isoformat() if request.cancelled_at else None,
    }


def resync_command(args: Any) -> None:
    with _operations(args) as operations:
        request = operations.resync(
            _queue(operations, args),
            args.type,
            _day_or_instant(args.start, "--from"),
            _day_or_instant(args.end, "--to"),
            owners=args.owners,
            reason=args.reason,
            key=args.key,
            by=args.by or getpass.getuser(),
            dry_run=args.dry_run,
        )
        if not args.dry_run:
            _print([{"key": request.key, "made": request.made, "jobs": request.jobs}], args)
        elif not request.windows:
            print(f"re-sync {request.key} was asked for already ({request.jobs} jobs): nothing would be made")
        else:
            _print(_windows_rows(request), args)


def _windows_rows(request: ResyncRequest) -> list[dict[str, Any]]:
    """The windows a dry run cut, one row each (one per owner group of a snapshot type), newest first."""
    return [
        {
            "owners": ",".join(group.owners),
            "window_start": start.isoformat() if start is not None else "snapshot",
            "window_end": end.isoformat() if end is not None else "",
        }
        for group in request.windows
        for start, end in group.windows or [(None, None)]
    ]


def resyncs_command(args: Any) -> None:
    with _operations(args) as operations:
        queue = _queue(operations, args)
        if args.cancel:
            done = operations.cancel(queue, request=args.cancel, by=args.by or getpass.getuser())
            _print([{"key": args.cancel, "abandoned": done.abandoned, "stopping": done.stopping}], args)
        elif args.requeue:
            count = operations.requeue(queue, request=args.requeue, force_deletions=args.force_deletions)
            _print([{"key": args.requeue, "requeued": count}], args)
        else:
            _print([_resync_row(p) for p in operations.resyncs(queue, key=args.key, limit=args.limit)], args)


def credentials_command(args: Any) -> None:
    """``set OWNER``: the credentials from ``--file`` or stdin (a prompt that does not echo at a terminal), never
    from argv, which other users see in the process list and the shell keeps in its history. ``show [OWNER]``:
    their state."""
    now = datetime.now(timezone.utc)
    with _operations(args) as operations:
        queue = _queue(operations, args)
        if args.action == "set":
            if not args.owner:
                raise DeclarationError("credentials set needs the owner: airflow synclane credentials set OWNER")
            credentials = Credentials.from_text(_credentials_text(args.file), now=now)
            states = [operations.set_credentials(queue, args.owner, credentials)]
        else:
            states = operations.credentials(queue, args.owner)
        _print([_credentials_row(state, now) for state in states], args)


def _credentials_text(path: str | None) -> str:
    if path is not None:
        try:
            with open(path, encoding="utf-8") as given:
                return given.read()
        except OSError as exc:
            raise DeclarationError(f"cannot read the credentials file {path!r}: {exc.strerror}") from None
    if sys.stdin.isatty():
        return getpass.getpass("API key, or credentials as JSON (not shown): ")
    return sys.stdin.read()


def _credentials_row(state: CredentialState, now: datetime) -> dict[str, Any]:
    return {
        "owner": state.owner,
        "kind": state.kind,
        "state": state.describe(now),
        "expires_at": state.expires_at and state.expires_at.isoformat(),
        "refreshed_at": state.refreshed_at and state.refreshed_at.isoformat(),
        "needs_reconnecting_at": state.needs_reconnecting_at and state.needs_reconnecting_at.isoformat(),
    }


def schema_command(args: Any) -> None:
    """``python -m synclane_provider.core.schema`` on the configured connection and the declaration's schema."""
    from synclane_provider.core.db import schema
    from synclane_provider.hooks.synclane import SyncLaneHook
    from synclane_provider.locate import locate_synclane

    name = args.schema
    if name is None:
        try:
            name = locate_synclane(declaration_path(args.declaration)).schema
        except SyncLaneError as exc:
            sys.exit(f"synclane: {exc} (or name the schema with --schema)")
    _connections_as_airflow_commands_find_them()
    with _connection_found():
        try:
            url = SyncLaneHook(synclane_conn_id=conn_id(args.conn_id)).conninfo()
        except SyncLaneError as exc:  # not a PostgreSQL connection
            sys.exit(f"synclane: {exc}")
    code = schema.main(["--schema", name, args.action, "--database-url", url])
    if code:
        sys.exit(code)
