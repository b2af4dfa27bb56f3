"""The ``airflow synclane`` command group: arguments only. Airflow builds its parser from this at every
``airflow`` call, so nothing here imports more than Airflow's CLI config and the engine's states (which import nothing); the
commands are loaded lazily."""

from __future__ import annotations

from airflow.cli.cli_config import ARG_OUTPUT, ARG_VERBOSE, ActionCommand, Arg, GroupCommand, lazy_load_command

from synclane_provider.core.states import JobMode, JobStatus

COMMANDS = "synclane_provider.cli.commands"

ARG_CONN_ID = Arg(
    ("--conn-id",),
    help="the Airflow connection to the jobs table (default: \\[synclane] conn_id, else synclane_default)",
)
ARG_DECLARATION = Arg(
    ("--declaration",),
    help="the declaration, package.module:attribute (default: \\[synclane] declaration, else $SYNCLANE_DECLARATION)",
)
ARG_QUEUE = Arg(("-q", "--queue"), help="the queue (default: the declaration's only queue)")
ARG_OWNER = Arg(("--owner",), help="only this owner")
ARG_TYPE = Arg(("--type",), help="only this job type")
ARG_STATUS = Arg(
    ("--status",),
    choices=tuple(status.value for status in JobStatus),
    help="only jobs in this status",
)
ARG_MODE = Arg(("--mode",), choices=tuple(mode.value for mode in JobMode), help="only jobs of this mode")
ARG_BEFORE = Arg(("--before",), type=int, help="only jobs with a smaller id (the next page after that id)")
ARG_AFTER = Arg(("--after",), help="start after this name (the next page)")
ARG_LIMIT = Arg(("--limit",), type=int, default=50, help="at most this many rows (default 50, at most 500)")
ARG_TROUBLED = Arg(
    ("--troubled",),
    action="store_true",
    help="only owners in trouble: paused, failing, degraded, or with deferred or abandoned jobs",
)
ARG_WIDE = Arg(("--wide",), action="store_true", help="a table of every column (default: those that fit 100 columns)")
ARG_OWNER_POSITIONAL = Arg(("owner",), nargs="?", help="one owner (default: every owner, a page at a time)")
ARG_OWNER_REQUIRED = Arg(("owner",), help="the owner")
ARG_TYPE_REQUIRED = Arg(("type",), help="the job type")
ARG_JOB_ID = Arg(("--job-id",), type=int, help="only this job")
ARG_FORCE_DELETIONS = Arg(
    ("--force-deletions",),
    action="store_true",
    help="let a snapshot delete the rows it did not see even past its destination's declared share",
)
ARG_REASON = Arg(("--reason",), required=True, help="why (written into each job's error), e.g. 'account disconnected'")
ARG_PAUSE_REASON = Arg(("--reason",), required=True, help="why the owner is paused, e.g. 'token revoked'")
ARG_BY = Arg(("--by",), help="who pauses it (default: the user running the command)")
ARG_WINDOW_START = Arg(("--window-start",), help="the window's start, ISO 8601 with a time zone (windowed types)")
ARG_WINDOW_END = Arg(("--window-end",), help="the window's end, ISO 8601 with a time zone (windowed types)")
ARG_KEY = Arg(("--key",), help="the job's key (default: its window, or the time of the enqueue)")
ARG_RUN_AT = Arg(("--run-at",), help="not before this instant, ISO 8601 with a time zone (default: now)")
ARG_LANE = Arg(("--lane",), help="the lane, only for an owner the owner source does not list")
ARG_RESYNC_TYPE = Arg(("--type",), required=True, help="the job type to sync again")
ARG_RESYNC_FROM = Arg(
    ("--from",),
    dest="start",
    required=True,
    help="the range's start: a day (midnight UTC) or ISO 8601 with a time zone",
)
ARG_RESYNC_TO = Arg(("--to",), dest="end", required=True, help="the range's end (excluded), as --from")
ARG_RESYNC_OWNERS = Arg(
    ("--owner",), dest="owners", action="append", help="only this owner (repeat for several; default: every owner)"
)
ARG_RESYNC_REASON = Arg(
    ("--reason",), required=True, help="why, e.g. 'March totals were wrong' (shown with the request)"
)
ARG_RESYNC_KEY = Arg(("--key",), help="the request's key: the same key again adds nothing (default: a new request)")
ARG_RESYNC_BY = Arg(("--by",), help="who asks (default: this user's login name)")
ARG_RESYNC_DRY_RUN = Arg(
    ("--dry-run",), action="store_true", help="make nothing: print the windows the request would make, by owners"
)
ARG_RESYNC_SHOW = Arg(("--key",), help="only this request")
ARG_RESYNC_CANCEL = Arg(
    ("--cancel",), metavar="KEY", help="cancel this request: waiting jobs now, running ones after their page"
)
ARG_RESYNC_REQUEUE = Arg(("--requeue",), metavar="KEY", help="fresh attempts for this request's failed jobs")
ARG_SCHEMA_ACTION = Arg(
    ("action",),
    choices=("sql", "apply", "status"),
    help="sql: print what is pending; apply: apply it; status: each migration",
)
ARG_CREDENTIALS_ACTION = Arg(
    ("action",),
    choices=("set", "show"),
    help="set: the owner's credentials, read from stdin or --file (never from the command line); show: their state",
)
ARG_CREDENTIALS_FILE = Arg(
    ("--file",),
    help="read the credentials from this file: an API key, or JSON with api_key, or access_token, refresh_token "
    "and expires_at or expires_in (default: stdin)",
)
ARG_SCHEMA_NAME = Arg(("--schema",), help="the schema (default: the declaration's)")

COMMON = (ARG_CONN_ID, ARG_DECLARATION, ARG_OUTPUT, ARG_VERBOSE)


def _command(name: str, help: str, *args: Arg) -> ActionCommand:
    return ActionCommand(
        name=name, help=help, func=lazy_load_command(f"{COMMANDS}.{name}_command"), args=(*args, *COMMON)
    )


SYNCLANE_COMMANDS = (
    _command("queues", "Each queue: jobs by status, the last hour, the oldest due job's wait"),
    _command(
        "jobs",
        "Jobs, newest first, filtered",
        ARG_QUEUE,
        ARG_OWNER,
        ARG_TYPE,
        ARG_STATUS,
        ARG_MODE,
        ARG_BEFORE,
        ARG_LIMIT,
    ),
    _command(
        "lanes",
        "Busy lanes: the running jobs, waiting jobs, when the next goes or what holds it, the rate",
        ARG_QUEUE,
        ARG_AFTER,
        ARG_LIMIT,
        ARG_WIDE,
    ),
    _command(
        "progress",
        "Owners' condition, initial load, records, freshness and troubled jobs (or one owner's initial load)",
        ARG_OWNER_POSITIONAL,
        ARG_QUEUE,
        ARG_TYPE,
        ARG_AFTER,
        ARG_TROUBLED,
        ARG_LIMIT,
        ARG_WIDE,
    ),
    _command("plan", "Plan the queue (or one owner) now", ARG_QUEUE, ARG_OWNER),
    _command(
        "enqueue",
        "Put one job in by hand",
        ARG_OWNER_REQUIRED,
        ARG_TYPE_REQUIRED,
        ARG_QUEUE,
        ARG_WINDOW_START,
        ARG_WINDOW_END,
        ARG_KEY,
        ARG_RUN_AT,
        ARG_LANE,
    ),
    _command(
        "requeue",
        "Fresh attempts for failed, deferred and abandoned jobs, from their cursors",
        ARG_QUEUE,
        ARG_OWNER,
        ARG_TYPE,
        ARG_JOB_ID,
        ARG_FORCE_DELETIONS,
    ),
    _command(
        "cancel",
        "Stop an owner's work: waiting jobs abandoned now, a running one after its page",
        ARG_OWNER_REQUIRED,
        ARG_REASON,
        ARG_QUEUE,
        ARG_TYPE,
    ),
    _command(
        "pause",
        "Pause an owner: none of its jobs is taken (a running one stops after its page) until it is resumed",
        ARG_OWNER_REQUIRED,
        ARG_PAUSE_REASON,
        ARG_BY,
        ARG_QUEUE,
    ),
    _command(
        "resume",
        "Resume a paused owner: its jobs go on from their cursors, and what the pause skipped is planned",
        ARG_OWNER_REQUIRED,
        ARG_QUEUE,
    ),
    _command(
        "owners",
        "Owners' condition (paused, failing, degraded, behind or healthy) and pauses",
        ARG_QUEUE,
        ARG_TROUBLED,
        ARG_AFTER,
        ARG_LIMIT,
        ARG_WIDE,
    ),
    _command(
        "resync",
        "Sync a range of one type again, as one request: sliced like history, newest first, after fresh work",
        ARG_RESYNC_TYPE,
        ARG_RESYNC_FROM,
        ARG_RESYNC_TO,
        ARG_RESYNC_OWNERS,
        ARG_RESYNC_REASON,
        ARG_RESYNC_KEY,
        ARG_RESYNC_BY,
        ARG_RESYNC_DRY_RUN,
        ARG_QUEUE,
    ),
    _command(
        "resyncs",
        "Re-sync requests with their progress; cancel one, or requeue its failures",
        ARG_QUEUE,
        ARG_RESYNC_SHOW,
        ARG_RESYNC_CANCEL,
        ARG_RESYNC_REQUEUE,
        ARG_FORCE_DELETIONS,
        ARG_RESYNC_BY,
        ARG_LIMIT,
    ),
    _command(
        "credentials",
        "Owners' credentials: set one owner's (encrypted in the jobs database), or show their state, never a value",
        ARG_CREDENTIALS_ACTION,
        ARG_OWNER_POSITIONAL,
        ARG_CREDENTIALS_FILE,
        ARG_QUEUE,
    ),
    _command(
        "schema",
        "The jobs table's migrations: print what is pending, apply it, or list each",
        ARG_SCHEMA_ACTION,
        ARG_SCHEMA_NAME,
    ),
)


def get_synclane_cli_commands() -> list[GroupCommand]:
    return [
        GroupCommand(
            name="synclane",
            help="SyncLane's jobs: look, plan, enqueue, requeue, cancel, re-sync, pause and resume owners",
            subcommands=SYNCLANE_COMMANDS,
        )
    ]
