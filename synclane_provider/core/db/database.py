"""The driver boundary: connections, named statements, and surviving a database that goes away.

Every statement the engine runs is safe to repeat (fenced on the lease, absolute
values, ``ON CONFLICT DO NOTHING``, or a take that first looks for a job the
worker already holds), so a statement whose connection broke is simply run
again on a new connection after a backoff. So is one the server turned down for
a passing reason (a timeout, a deadlock, a shutdown, no room). A statement the
server refuses for what it is (a value too large for an index, a constraint, a
privilege) fails at once: repeating it would only hide the error for minutes.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row

from synclane_provider.core.db.queries import Statement, statement
from synclane_provider.core.db.schema_versions import Migration, ensure_schema
from synclane_provider.core.db.transient import Backoff, describe, passes, refused
from synclane_provider.core.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

LET_GO_EVERY = 0.1
"""How often a session backing off looks whether it should stop or let go, in seconds."""

ConnectionFactory = Callable[[], "psycopg.Connection[Any]"]


class Traffic:
    """What the sessions of one :class:`Database` sent: statements by name, connections opened, and the results
    whose column names were read.

    Counted, never timed, so that a test can hold the engine to a cost per job that does not depend on the
    machine (tests/test_cost.py): a statement more per job, or a connection reopened per idle wait, shows as a
    count that grew. Thread-safe; :meth:`snapshot` and subtraction give the traffic of a stretch of work.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements: Counter[str] = Counter()
        """Statements sent, by name (``queries.sql``'s names; a connection's own settings as ``connect:set``)."""
        self.connections = 0
        """Connections opened."""
        self.described = 0
        """Results whose column names were read (once per statement and connection, see ``Session._columns``)."""

    def sent(self, name: str) -> None:
        with self._lock:
            self.statements[name] += 1

    def opened(self, settings: int) -> None:
        with self._lock:
            self.connections += 1
            self.statements["connect:set"] += settings

    def read_columns(self) -> None:
        with self._lock:
            self.described += 1

    def snapshot(self) -> "Traffic":
        copy = Traffic()
        with self._lock:
            copy.statements = Counter(self.statements)
            copy.connections = self.connections
            copy.described = self.described
        return copy

    def __sub__(self, earlier: "Traffic") -> "Traffic":
        later, difference = self.snapshot(), Traffic()
        difference.statements = later.statements - earlier.statements
        difference.connections = later.connections - earlier.connections
        difference.described = later.described - earlier.described
        return difference

    def __repr__(self) -> str:
        return (
            f"Traffic(connections={self.connections}, statements={dict(self.statements)}, described={self.described})"
        )

    @property
    def total(self) -> int:
        """Statements sent, all names together."""
        return sum(self.statements.values())


class Database:
    """Where the jobs table lives: a conninfo string, or a function that opens a psycopg connection.

    It opens connections only for the sessions that use it (an :class:`Operations`, a worker slot), each
    closed by its owner's ``close()``. :meth:`close` (or leaving a ``with`` block) closes every connection
    still open through this database, whoever opened it; a later call simply opens new ones.

    ``migrations`` are the schema versions this engine needs (default: the shipped ones); a test passes more
    to see how a pending migration is met.
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        connect: ConnectionFactory | None = None,
        schema: str = "synclane",
        create_schema: bool = True,
        application_name: str = "synclane",
        migrations: Sequence[Migration] | None = None,
    ) -> None:
        if (conninfo is None) == (connect is None):
            raise ValueError("give exactly one of conninfo or connect")
        self._conninfo = conninfo
        self._connect = connect
        self.schema = schema
        self.create_schema = create_schema
        self.application_name = application_name
        """How connections show in ``pg_stat_activity``, unless the conninfo names its own ``application_name``."""
        self.migrations = tuple(migrations) if migrations is not None else None
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._sessions_lock = threading.Lock()
        self.traffic = Traffic()
        """What this database's sessions sent (see :class:`Traffic`)."""

    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection returning rows as dicts, taking statements with ``$n`` placeholders
        (see :class:`~synclane_provider.core.db.queries.Statement`). The first one checks the schema's version, and
        applies what is pending when ``create_schema`` is on (see :mod:`~synclane_provider.core.db.schema_versions`).

        The caller owns the connection and closes it; sessions do (see :class:`Session`).
        """
        conn: psycopg.Connection[Any]
        if self._connect is not None:
            conn = self._connect()
            conn.autocommit = True
        else:
            assert self._conninfo is not None
            named = "application_name" in conninfo_to_dict(self._conninfo)
            name = None if named else self.application_name
            conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10, application_name=name)
        try:
            conn.row_factory = dict_row
            conn.cursor_factory = psycopg.RawCursor
            # Times come back in UTC (as timezone.utc), and interval arithmetic never crosses a DST change.
            conn.execute("SET TIME ZONE 'UTC'")
            # No JIT compilation: the engine's statements are index probes and batches of a few thousand rows,
            # which compiling made slower (70 ms added to a 200-ms coverage read of 20,000 owners).
            conn.execute("SET jit = off")
            self._ensure_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _ensure_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Once per Database: read the schema's version (SELECTs only), and bring it up to date when something
        is pending and ``create_schema`` is on; otherwise say what is missing. A failed check is made again by
        the next connection, so a worker started before its schema was migrated recovers once it is."""
        if self._schema_ready:
            return
        with self._schema_lock:
            if not self._schema_ready:
                ensure_schema(conn, self.schema, create=self.create_schema, migrations=self.migrations)
                self._schema_ready = True

    def session(self, **kwargs: Any) -> "Session":
        return Session(self, **kwargs)

    def _opened(self, session: "Session") -> None:
        with self._sessions_lock:
            self._sessions.add(session)

    def close(self) -> None:
        """Close every connection that a session opened through this database and still holds."""
        with self._sessions_lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One connection used by one worker slot (or one operation), reopened with backoff when it breaks.

    Thread-safe: a worker's heartbeat thread shares its session.
    """

    def __init__(
        self,
        database: Database,
        *,
        give_up_after: timedelta = timedelta(minutes=5),
        first_backoff: float = 0.1,
        max_backoff: float = 5.0,
        stop: threading.Event | None = None,
        let_go: Callable[[], bool] | None = None,
        settings: Mapping[str, str] | None = None,
        prepare_threshold: int | None = 5,
        wait_out_refusals: bool = True,
    ) -> None:
        self.database = database
        self.wait_out_refusals = wait_out_refusals
        """Whether a connection the server turns down (no such database, a refused login: see
        :func:`~synclane_provider.core.db.transient.refused`) is tried again like an unreachable one. A worker
        waits it out (a database being restored, a role being re-created); a command line reports it at once."""
        self.settings = dict(settings or {})
        """Server settings for this session's connections (``SET name TO value`` after each connect)."""
        self.prepare_threshold = prepare_threshold
        """Runs of a statement before it is prepared on the server (psycopg's setting; None: never)."""
        self.give_up_after = give_up_after
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self._stop = stop
        self._let_go = let_go
        self._conn: psycopg.Connection[Any] | None = None
        self._cursor: psycopg.Cursor[Any] | None = None
        """The connection's one cursor, used for every statement (a worker sends thousands: a cursor each
        would set up its adapters and row maker each time)."""
        self._pinned = False
        """On one connection that is never replaced (see :meth:`pinned`)."""
        self._names: dict[bytes, list[str]] = {}
        """Column names of each statement's result on the current connection (see :meth:`_columns`)."""
        self._lock = threading.RLock()
        self.reconnects = 0
        self.resent = 0
        """Statements sent again after their connection broke while they were in flight: each may have run
        before (its reply was lost), so its repeat can find its own work already done."""

    def run(
        self, name: str, *, source: str = "queries.sql", prepare: bool | None = None, **params: Any
    ) -> list[dict[str, Any]]:
        """Run the named statement of ``source`` and return its rows, reconnecting while the database is away.

        ``prepare=False`` sends it unprepared, so that it is planned for its values every time: a statement
        whose filters are optional (``%(owner)s IS NULL OR …``) would otherwise get a generic plan after a
        few runs, one that reads the whole table for any filter.
        """
        query = statement(name, self.database.schema, source)
        arguments = query.arguments(params)

        traffic = self.database.traffic

        def work(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            traffic.sent(name)
            cursor = self._cursor
            if cursor is None or cursor.connection is not conn:
                cursor = conn.cursor(row_factory=tuple_row)
            rows = cursor.execute(query.text, arguments, prepare=prepare).fetchall()
            return [dict(zip(self._columns(query, cursor), row, strict=True)) for row in rows] if rows else []

        return self._with_connection(name, work)

    def _columns(self, query: Statement, cursor: psycopg.Cursor[Any]) -> list[str]:
        """The names of the columns ``query`` returned, read from the result once per statement and connection.

        A worker sends the same few statements thousands of times, and a job's row has thirty columns: decoding
        their names from every result (what psycopg's ``dict_row`` does) cost more than building the rows.
        Prepared once per connection, a statement returns the same columns every time; the count is checked.
        """
        result = cursor.pgresult
        assert result is not None
        names = self._names.get(query.text)
        if names is None or len(names) != result.nfields:
            names = self._names[query.text] = [column.name for column in cursor.description or ()]
            self.database.traffic.read_columns()
        return names

    def _with_connection(self, label: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Do ``work`` on this session's connection; when the connection breaks, back off, reconnect, repeat."""
        started = time.monotonic()
        backoff: Backoff | None = None  # made at the first failure: most statements never need one
        failures = 0
        error: psycopg.Error
        while True:
            with self._lock:
                try:
                    conn = self._connection()
                except psycopg.OperationalError as exc:
                    if not self.wait_out_refusals and refused(exc):
                        raise DatabaseUnavailableError(f"the database refused the connection: {describe(exc)}") from exc
                    error = exc  # could not connect
                else:
                    try:
                        return work(conn)
                    except psycopg.Error as exc:
                        if not passes(exc, connection_closed=conn.closed):
                            raise
                        if conn.closed:
                            self._discard()
                            self.resent += 1
                        error = exc
            failures += 1
            if self._stopping() and failures > 1:
                raise DatabaseUnavailableError(
                    f"gave up running {label!r} while stopping: {describe(error)}"
                ) from error
            if backoff is None:
                left = self.give_up_after.total_seconds() - (time.monotonic() - started)
                backoff = Backoff(self.first_backoff, self.max_backoff, left)
            wait = backoff.next()
            if wait is None:
                raise DatabaseUnavailableError(
                    f"database unreachable for {self.give_up_after} while running {label!r}: {describe(error)}"
                ) from error
            log.warning("database error during %s (%s); retrying in %.1fs", label, describe(error), wait)
            self._sleep(wait)

    @contextmanager
    def giving_up_after(self, limit: timedelta) -> Iterator[None]:
        """Within the block, give up on an unreachable database after ``limit`` at most."""
        before, self.give_up_after = self.give_up_after, min(limit, self.give_up_after)
        try:
            yield
        finally:
            self.give_up_after = before

    def one(self, name: str, **params: Any) -> dict[str, Any] | None:
        rows = self.run(name, **params)
        return rows[0] if rows else None

    @classmethod
    def pinned(cls, database: Database, conn: psycopg.Connection[Any]) -> "Session":
        """A session on ``conn`` alone, inside whatever transaction it has open: a statement that fails is
        raised at once, never sent again on another connection (what the transaction held would be lost)."""
        session = cls(database, give_up_after=timedelta(0))
        session._conn, session._cursor, session._pinned = conn, conn.cursor(row_factory=tuple_row), True
        return session

    def connection(self) -> psycopg.Connection[Any]:
        """The session's connection, opened if need be, for a transaction of the caller's own (a page's, see
        core.db.page_transaction); the caller leaves it in autocommit, or closes it."""
        with self._lock:
            return self._connection()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._pinned and (self._conn is None or self._conn.closed):
            raise psycopg.OperationalError("the pinned connection is closed")
        if self._conn is None or self._conn.closed:
            self.database._opened(self)
            conn = self.database.connect()
            try:
                for name, value in self.settings.items():
                    conn.execute(sql.SQL("SET {} TO {}").format(sql.Identifier(name), sql.Literal(value)))
                conn.prepare_threshold = self.prepare_threshold
            except BaseException:
                conn.close()
                raise
            self.database.traffic.opened(settings=1 + len(self.settings))  # SET TIME ZONE, then the session's
            self._conn, self._cursor, self._names = conn, conn.cursor(row_factory=tuple_row), {}
        return self._conn

    def _discard(self) -> None:
        """Drop a broken connection; the next statement opens a new one."""
        conn, self._conn, self._cursor = self._conn, None, None
        if conn is not None:
            self.reconnects += 1
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it is already broken; closing is a courtesy
                pass

    def _stopping(self) -> bool:
        """A stopping worker tries a fresh connection once (a killed connection is the common case), then
        lets go instead of waiting minutes for the database: its lease lapses and another worker continues.
        So does a session whose ``let_go`` says so (a pool slot still connecting when the pool is done)."""
        return (self._stop is not None and self._stop.is_set()) or (self._let_go is not None and self._let_go())

    def _sleep(self, seconds: float) -> None:
        """Back off, but wake early when asked to stop or to let go."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self._stopping():
            if self._stop is not None:
                self._stop.wait(min(left, LET_GO_EVERY))
            else:
                time.sleep(min(left, LET_GO_EVERY))

    def close(self) -> None:
        with self._lock:
            conn, self._conn, self._cursor = self._conn, None, None
            if conn is not None:
                conn.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
