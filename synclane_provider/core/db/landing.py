"""Landing a handler's records in a PostgreSQL table: one page, one statement, written once.

A :class:`Destination` is declared once per table: the key its rows are matched on, an optional version column
(a row older than the stored one is refused, and counted as stale), whether to compare content (a row equal to
the stored one writes nothing: no new tuple, so no trigger fires and nothing goes to replicas), and the owner
column that :meth:`Destination.land` fills with the job's owner. A handler lands a page in one line::

    orders = Destination("shop.orders", key=("account", "id"), owner="account", version="updated_at")

    def handler(job):
        page = client.orders(job.owner, job.cursor)
        orders.land(job, page.items)
        return Page(page.next_cursor, len(page.items))

A page is landed by one statement, in one round trip: its columns sent as arrays in binary and unnested, each
row looks up its key's stored row once (unless no stored key lies in the page's range of keys), new keys are
inserted plainly and changed rows go through an ``INSERT … ON CONFLICT … DO UPDATE … WHERE`` whose ``WHERE`` is
the guard; a row the guard refuses is not even locked. That statement is ``landing.sql``'s ``land_page``. A page
of new keys (a first landing in key order) is copied instead: one look at its range of keys finds none stored,
and its rows go in by ``COPY`` in binary, in a savepoint that a key inserted meanwhile by another transaction
sends back to ``land_page``. The table must have a unique index on the key (ON CONFLICT needs it); the first
page checks that, and that every column named exists, and refuses with a
:class:`~synclane_provider.core.errors.LandingError` naming what is missing.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.queries import named_statements
from synclane_provider.core.db.store import Finish, SavedPage, Store
from synclane_provider.core.errors import DeclarationError, LandingError
from synclane_provider.core.records import Job, LandCounts

Row = Mapping[str, Any]
T = TypeVar("T")
_SAVEPOINT = b"SAVEPOINT synclane_land_page"
_ROLLBACK_TO_SAVEPOINT = b"ROLLBACK TO SAVEPOINT synclane_land_page"
_RELEASE_SAVEPOINT = b"RELEASE SAVEPOINT synclane_land_page"
_INTEGER_LIMITS = {21: 2**15, 23: 2**31, 20: 2**63}
_WITH_MIN_AND_MAX = frozenset(
    ("smallint", "integer", "bigint", "numeric", "real", "double precision", "text", "character varying", "date")
    + ("timestamp without time zone", "timestamp with time zone")
)
"""Key column types whose page bounds are taken with min and max (ordered as their default operator class is)."""
"""int2, int4 and int8 by type oid: the magnitude their values stay below (a COPY in binary would wrap them)."""


@functools.cache
def _texts() -> dict[str, str]:
    return named_statements(__package__, "landing.sql")


def _one_scalar_kind(values: list[Any]) -> bool:
    """Whether the values (None aside) are all of one Python type that is sent as it is: not a list, a tuple or
    a dict (a page's column goes as one array, and psycopg dumps an array of one type)."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    return len(kinds) <= 1 and not any(issubclass(k, (list, tuple, dict)) for k in kinds)


def _as_text(conn: psycopg.Connection[Any], values: list[Any]) -> list[str | None]:
    """The values as psycopg writes them in text (what COPY would send), for the server to read as the column's type."""
    transformer = Transformer(conn)
    encoding = conn.info.encoding

    def text(value: Any) -> str:
        dumped = transformer.get_dumper(value, PyFormat.TEXT).dump(value)
        assert dumped is not None
        return bytes(dumped).decode(encoding)

    return [None if v is None else text(v) for v in values]


def _column_list(names: Iterable[str], prefix: str | None = None) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(prefix, n) if prefix else sql.Identifier(n) for n in names)


class Destination:
    """A PostgreSQL table that pages of records land in, matched on ``key``.

    ``table`` is ``"name"`` or ``"schema.name"``. ``version`` names a column whose larger value is the newer
    row; ``compare`` (default on) leaves a row equal to the stored one unwritten; ``owner`` names the column that
    holds the job's owner, filled by :meth:`land` (a row may leave it out). ``conninfo`` (or ``connect``, a
    function returning a new psycopg connection) is the database the table is in; each thread keeps one
    connection of its own, opened at its first page, never at declaration.
    """

    def __init__(
        self,
        table: str,
        *,
        key: Sequence[str],
        version: str | None = None,
        compare: bool = True,
        owner: str | None = None,
        conninfo: str | None = None,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
        deletions: str | None = None,
        deleted_column: str | None = None,
        deletion_share: float = 0.5,
    ) -> None:
        parts = table.split(".") if isinstance(table, str) else []
        if not 1 <= len(parts) <= 2 or not all(parts):
            raise DeclarationError(f"table must be 'name' or 'schema.name', not {table!r}")
        if isinstance(key, str):
            key = (key,)
        key = tuple(key)
        if not key or not all(isinstance(k, str) and k for k in key) or len(set(key)) != len(key):
            raise DeclarationError(f"key must be one or more distinct column names, not {key!r}")
        for what, name in (("version", version), ("owner", owner)):
            if name is not None and (not isinstance(name, str) or not name):
                raise DeclarationError(f"{what} must be a column name, not {name!r}")
        if version is not None and version in key:
            raise DeclarationError(f"the version column {version!r} cannot be part of the key {key!r}")
        if conninfo is not None and connect is not None:
            raise DeclarationError("give at most one of conninfo or connect")
        if deletions not in (None, "delete", "mark"):
            raise DeclarationError(f"deletions must be 'delete', 'mark' or None, not {deletions!r}")
        if deletions is not None and owner is None:
            raise DeclarationError(
                "deletions need the owner column: a snapshot deletes its owner's rows it did not see"
            )
        if (deletions == "mark") != (deleted_column is not None):
            raise DeclarationError(
                "deletions='mark' needs deleted_column (a timestamptz column), and only it takes one"
            )
        if not isinstance(deletion_share, (int, float)) or not 0 < deletion_share <= 1:
            raise DeclarationError(f"deletion_share must be a share above 0 and at most 1, not {deletion_share!r}")
        self.table = table
        self.key = key
        self.version = version
        self.compare = compare
        self.owner = owner
        self.deletions = deletions
        self.deleted_column = deleted_column
        self.deletion_share = float(deletion_share)
        self._seen = sql.Identifier(*parts[:-1], f"synclane_seen_{parts[-1]}"[:63])
        self._seen_index = sql.Identifier(f"synclane_seen_{parts[-1]}_job"[:63])
        """Where a snapshot's pages note the keys they landed, by job, until it completes."""
        self._conninfo = conninfo
        self._connect = connect
        self._name = sql.Identifier(*parts)
        self._table_columns: dict[str, tuple[str, bool]] | None = None
        """The table's columns, each one's type and whether it is sent as text, read at the first page."""
        self._ranged = False
        """Whether a unique index on the key orders keys as comparing them does (read at the first page): then a
        page whose range of keys holds no stored key is inserted without a probe a row."""
        self._copied_as: dict[str, int] = {}
        """The type each column's values are copied as (its own, text for a string type)."""
        self._copies = True
        """Whether a page of new keys may be copied (a table that refused a COPY other than on a key is not)."""
        self._statements: dict[tuple[tuple[str, ...], tuple[bool, ...], bool, bool], tuple[bytes, bytes]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._opened: list[psycopg.Connection[Any]] = []

    def __repr__(self) -> str:
        return f"Destination({self.table!r}, key={self.key!r}, version={self.version!r}, compare={self.compare!r})"

    @property
    def in_jobs_database(self) -> bool:
        """Declared without a database of its own: the table is in the jobs database, and a worker lands each page
        in the transaction that saves the job's cursor (exactly once)."""
        return self._conninfo is None and self._connect is None

    def land(self, job: Job, rows: Iterable[Row], *, complete: bool = False) -> LandCounts:
        r"""Land one page of ``job``'s records (mappings of column to value); what it did.

        With deletions declared, each page notes the keys it landed, and the page that ``complete``\ s the
        snapshot (its last: the handler returns no next cursor) deletes, or marks deleted, the owner's rows
        none of its pages saw -- unless it saw nothing at all, or more than ``deletion_share`` of the owner's
        rows would go: then it raises :class:`~synclane_provider.core.errors.LandingError` naming both counts,
        nothing of the page is written, and the job fails; a requeue with ``force_deletions`` goes ahead.

        In the jobs database, run by a worker, the rows are written in the page's transaction, which commits with
        the job's cursor and count, fenced on its lease: the page lands exactly once, and not at all when the
        job was taken over meanwhile. In another database they are committed now: a page cut off before its
        cursor is saved lands again, which the key, the version guard and the content comparison make harmless.

        Run by a worker, what it did is added to the job's counts (``inserted_count`` … ``deleted_count`` on its
        row), written by the statement that saves the page's cursor or completes the job: a page whose cursor is
        not saved (it failed, its lease was lost) counts nothing, and a retry adds what its pages land.
        """
        page_transaction = job.page_transaction
        if self.in_jobs_database and isinstance(page_transaction, PageTransaction):
            counts = self._land(page_transaction.connection(), job, rows, complete)
        else:
            conn = self._connection()
            try:
                with conn.transaction():
                    counts = self._land(conn, job, rows, complete)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self._local.conn = None
                conn.close()
                raise
        job.count_landed(counts)  # a worker adds them to the job's row with the page's cursor
        return counts

    def _land(self, conn: psycopg.Connection[Any], job: Job, rows: Iterable[Row], complete: bool) -> LandCounts:
        counts = self.write(conn, rows, owner=job.owner, job_id=job.id if self.deletions else None)
        if self.deletions is not None and complete:
            counts += LandCounts(deleted=self._delete_unseen(conn, job))
        return counts

    def write(
        self, conn: psycopg.Connection[Any], rows: Iterable[Row], *, owner: str | None, job_id: int | None = None
    ) -> LandCounts:
        """Land ``rows`` on ``conn`` inside the caller's transaction, which commits or rolls back with them.

        Rows of the same key in one page are landed once: the newest by the version column (the last one when
        there is none or they tie); the others count as stale.
        """
        page, columns, superseded = self._page(rows, owner)
        if not page:
            return LandCounts(stale=superseded)
        types = self._check(conn, columns)
        # The owner column is the same in every row: it goes as one value, every other column as one array.
        arrays = {name: list(map(operator.itemgetter(name), page)) for name in columns if name != self.owner}
        as_text = tuple(
            name != self.owner and (types[name][1] or not _one_scalar_kind(arrays[name])) for name in columns
        )
        params: dict[str, Any] = {"job": job_id, "owner": owner}
        for number, (name, text) in enumerate(zip(columns, as_text, strict=True)):
            if name != self.owner:
                params[f"c{number}"] = _as_text(conn, arrays[name]) if text else arrays[name]
        # The page's range of keys is looked at first when the last page this thread landed was all new keys (a
        # first landing in key order): one probe for the page instead of one a row.
        ranged = (
            self._ranged
            and getattr(self._local, "all_new", True)
            and all(None not in arrays[name] for name in self.key if name != self.owner)
        )
        copied_as = self._copy_types(conn, columns, arrays, as_text, owner) if ranged and job_id is None else None
        land_page, upsert_page = self._statements_for(
            conn, columns, as_text, snapshot=job_id is not None, ranged=ranged and copied_as is None
        )
        in_transaction = not (conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE)
        # Named parameters, whatever cursors the connection makes; the savepoint (of the caller's transaction, never
        # one of its own, which would commit) and its release go in the statement's round trip.
        with psycopg.Cursor(conn, row_factory=tuple_row) as cur, psycopg.Cursor(conn) as savepoint:
            if copied_as is not None:  # all new keys, as a first landing in key order has: copied, no probe at all
                page_range_stored, copy_page = self._copy_statements(conn, columns)
                with conn.pipeline():  # the savepoint the copy may go back to, in the look's round trip
                    if in_transaction:
                        savepoint.execute(_SAVEPOINT)
                    cur.execute(page_range_stored, params)
                stored = cur.fetchone()
                assert stored is not None
                copied = None if stored[0] else self._copy(cur, savepoint, copy_page, copied_as, columns, arrays, owner)
                if copied is not None:  # a row a trigger of the table skipped is not inserted: left as it was
                    self._local.all_new = True
                    return LandCounts(inserted=copied, unchanged=len(page) - copied, stale=superseded)
            try:
                with conn.pipeline():
                    if in_transaction and copied_as is None:  # else taken by the look at the page's range
                        savepoint.execute(_SAVEPOINT)
                    cur.execute(land_page, params)
                    if in_transaction:
                        savepoint.execute(_RELEASE_SAVEPOINT)
                counted = cur.fetchone()
            except psycopg.errors.UniqueViolation:  # a new key inserted meanwhile by another transaction
                if in_transaction:
                    savepoint.execute(_ROLLBACK_TO_SAVEPOINT)
                counted = cur.execute(upsert_page, params).fetchone()
        assert counted is not None
        inserted, updated, stale = (int(n) for n in (counted[0], counted[1], counted[2]))
        self._local.all_new = inserted == len(page)
        return LandCounts(
            inserted=inserted,
            updated=updated,
            unchanged=len(page) - inserted - updated - stale,
            stale=stale + superseded,
        )

    def _copy(
        self,
        cur: psycopg.Cursor[Any],
        savepoint: psycopg.Cursor[Any],
        copy_page: bytes,
        copied_as: list[int],
        columns: tuple[str, ...],
        arrays: dict[str, list[Any]],
        owner: str | None,
    ) -> int | None:
        """Copy a page of new keys into the table; the rows it inserted, None when it did not. A key another
        transaction inserted meanwhile (or a table that takes no COPY) leaves nothing of the copy behind: in the
        caller's transaction it is undone to the savepoint taken before it (which land_page then releases), and
        the page is landed by land_page."""
        in_transaction = cur.connection.info.transaction_status != TransactionStatus.IDLE
        try:
            with cur.copy(copy_page) as copy:
                copy.set_types(copied_as)
                count = len(next(iter(arrays.values()))) if arrays else 1  # a page of the owner column alone: one row
                for row in zip(*(repeat(owner, count) if name == self.owner else arrays[name] for name in columns)):
                    copy.write_row(row)
        except Exception as refused:
            if in_transaction:
                savepoint.execute(_ROLLBACK_TO_SAVEPOINT)
            if isinstance(refused, (psycopg.errors.FeatureNotSupported, psycopg.errors.WrongObjectType)):
                self._copies = False  # row-level security, a view: the table takes no COPY
            return None
        if in_transaction:
            savepoint.execute(_RELEASE_SAVEPOINT)
        return cur.rowcount

    def _copy_types(
        self,
        conn: psycopg.Connection[Any],
        columns: tuple[str, ...],
        arrays: dict[str, list[Any]],
        as_text: tuple[bool, ...],
        owner: str | None,
    ) -> list[int] | None:
        """The types to copy the page's columns as, when each column's values are of the column's type already (as
        psycopg sends them: a str for a string type, an aware datetime for timestamptz, an int in range for an
        integer type): a copy then lands exactly what land_page would. None otherwise, and when copies are off."""
        if not self._copies or any(as_text):
            return None
        transformer = Transformer(conn)
        types: list[int] = []
        for name in columns:
            oid = self._copied_as[name]
            values = [owner] if name == self.owner else arrays[name]
            if None in values:
                values = [v for v in values if v is not None]
            if not values:
                types.append(oid)
            elif type(values[0]) is int:
                limit = _INTEGER_LIMITS.get(oid)
                if limit is None or not -limit <= min(values) <= max(values) < limit:
                    return None
                types.append(oid)
            elif transformer.get_dumper(values[0], PyFormat.BINARY).oid == oid:
                types.append(oid)
            else:
                return None
        return types

    def _delete_unseen(self, conn: psycopg.Connection[Any], job: Job) -> int:
        """Delete (or mark) the owner's rows the snapshot ``job`` did not see, within the share; the rows gone."""
        assert self.owner is not None
        names = dict(
            seen=self._seen,
            table=self._name,
            key=_column_list(self.key),
            owner_column=sql.Identifier(self.owner),
            owner=sql.Literal(job.owner),
            job=sql.Literal(job.id),
            match=sql.SQL(" AND ").join(sql.SQL("s.{0} = t.{0}").format(sql.Identifier(k)) for k in self.key),
            live=sql.SQL("t.{} IS NULL").format(sql.Identifier(self.deleted_column))
            if self.deleted_column is not None
            else sql.SQL("true"),
        )
        with conn.cursor(row_factory=tuple_row) as cur:
            counted = cur.execute(sql.SQL(_texts()["unseen_counts"]).format(**names)).fetchone()
            assert counted is not None
            seen, unseen, stored = (int(n) for n in counted)
            share = f"{self.deletion_share:.0%}"
            if not job.force_deletions and unseen and (seen == 0 or unseen > self.deletion_share * stored):
                why = "it saw none of them" if seen == 0 else f"more than the declared share ({share})"
                raise LandingError(
                    f"{self.table}: the snapshot of {job.owner} saw {seen} row(s) and would delete {unseen} of the "
                    f"owner's {stored} row(s), {why}; nothing deleted (requeue the job with force_deletions "
                    "to delete them)"
                )
            if self.deleted_column is None:
                statement = _texts()["delete_unseen"]
            else:
                statement = _texts()["mark_unseen"]
                names["deleted"] = sql.Identifier(self.deleted_column)
            deleted = cur.execute(sql.SQL(statement).format(**names)).rowcount
            cur.execute(sql.SQL(_texts()["forget_seen"]).format(**names))
        return deleted

    def close(self) -> None:
        """Close every thread's connection (each reopens at its next page)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

    def _page(self, rows: Iterable[Row], owner: str | None) -> tuple[list[Row], tuple[str, ...], int]:
        """The page's rows, one per key (as given: the owner column, when a row leaves it out, is the job's owner);
        its columns, the owner column among them; and how many rows were superseded."""
        if self.owner is not None and owner is None:
            raise LandingError(f"{self.table}: the owner column {self.owner!r} needs the job's owner")
        rows = rows if isinstance(rows, list) else list(rows)
        as_given = self._page_as_given(rows, owner)
        if as_given is not None:
            return as_given
        owner_column: tuple[str, ...] = () if self.owner is None else (self.owner,)
        within = [k for k in self.key if k not in owner_column]  # the owner's part of the key is the same in every row
        key_of: Callable[[Row], Any] = operator.itemgetter(*within) if within else (lambda row: ())
        version = self.version
        newest: dict[Any, Row] = {}
        columns: tuple[str, ...] = ()
        shape: set[str] = set()
        number = 0
        for number, row in enumerate(rows, 1):
            if number == 1:
                columns = (*row, *(name for name in owner_column if name not in row))
                shape = set(columns)
            elif row.keys() != shape and row.keys() | set(owner_column) != shape:
                raise LandingError(
                    f"{self.table}: row {number} has columns {sorted(row)}, the first row {sorted(shape)}"
                )
            for name in owner_column:
                if row.get(name, owner) != owner:
                    raise LandingError(
                        f"{self.table}: row {number} has {name}={row[name]!r}, not the job's owner {owner!r}"
                    )
            try:
                key = key_of(row)
            except KeyError as missing:
                raise LandingError(f"{self.table}: row {number} has no key column {missing.args[0]!r}") from None
            if version is not None:
                if row.get(version) is None:
                    whole = tuple(row.get(k, owner) for k in self.key)
                    raise LandingError(
                        f"{self.table}: row {number} (key {whole!r}) has no {version!r} (the version column)"
                    )
                kept = newest.get(key)
                if kept is not None and kept[version] > row[version]:
                    continue
            newest[key] = row
        return list(newest.values()), columns, number - len(newest)

    def _page_as_given(self, rows: list[Row], owner: str | None) -> tuple[list[Row], tuple[str, ...], int] | None:
        """The usual page, checked a column at a time rather than a row at a time: every row of the first one's
        columns, its owner column (if it has one) the job's owner, a version in every row and no key twice. None
        when it is not so: :meth:`_page` then goes through the rows one by one, to name the row that is wrong or
        to keep the newest of a key's rows."""
        if not rows:
            return None
        first = rows[0]
        shape = first.keys()
        within = [k for k in self.key if k != self.owner]
        try:
            if not all(map(operator.eq, repeat(shape), map(operator.methodcaller("keys"), rows))):
                return None
            if self.owner is not None and self.owner in shape:
                if not all(map(operator.eq, repeat(owner), map(operator.itemgetter(self.owner), rows))):
                    return None
            if self.version is not None and None in map(operator.itemgetter(self.version), rows):
                return None
            if within and len(set(map(operator.itemgetter(*within), rows))) != len(rows):
                return None
        except (KeyError, TypeError):  # a key column missing, a key that cannot be hashed: told row by row
            return None
        if not within and len(rows) > 1:
            return None
        owner_column = () if self.owner is None or self.owner in shape else (self.owner,)
        return rows, (*first, *owner_column), 0

    def _check(self, conn: psycopg.Connection[Any], columns: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """At the first page: the table, its columns and a unique index on the key; then each page's columns.

        The table's columns: each one's type, and whether its values are sent as text."""
        if self._table_columns is None:
            query = sql.SQL(_texts()["unique_indexes"]).format(table_name=sql.Literal(self._name.as_string(conn)))
            with conn.cursor(row_factory=tuple_row) as cur:
                found = cur.execute(query).fetchone()
            if found is None:
                raise LandingError(f"table {self.table} does not exist")
            table_columns = {
                name: (type_name, bool(text))
                for name, type_name, text in zip(found[0], found[1], found[2], strict=True)
            }
            self._copied_as = dict(zip(found[0], found[3], strict=True))
            unique_keys = {frozenset(k.split(",")) for k in found[4]}
            named = [*self.key, *filter(None, (self.version, self.owner))]
            missing = [name for name in named if name not in table_columns]
            if missing:
                raise LandingError(f"table {self.table} has no column {', '.join(map(repr, missing))}")
            self._ranged = frozenset(self.key) in {frozenset(k.split(",")) for k in found[5]}
            if frozenset(self.key) not in unique_keys:
                raise LandingError(
                    f"table {self.table} has no unique index on the key ({', '.join(self.key)}): "
                    f"ON CONFLICT needs one (CREATE UNIQUE INDEX ON {self.table} ({', '.join(self.key)}))"
                )
            if self.deleted_column is not None and self.deleted_column not in table_columns:
                raise LandingError(f"table {self.table} has no column {self.deleted_column!r} (the deleted column)")
            if self.deletions is not None:
                for name in ("create_seen", "index_seen"):
                    conn.execute(
                        sql.SQL(_texts()[name]).format(
                            seen=self._seen,
                            seen_index=self._seen_index,
                            table=self._name,
                            key=_column_list(self.key),
                        )
                    )
            self._table_columns = table_columns
        unknown = [name for name in columns if name not in self._table_columns]
        if unknown:
            raise LandingError(f"table {self.table} has no column {', '.join(map(repr, unknown))} (named by a row)")
        return self._table_columns

    def _statements_for(
        self,
        conn: psycopg.Connection[Any],
        columns: tuple[str, ...],
        as_text: tuple[bool, ...],
        *,
        snapshot: bool,
        ranged: bool,
    ) -> tuple[bytes, bytes]:
        """``land_page`` and ``upsert_page`` for a page of these columns (those sent as text marked), composed once;
        ``ranged``, the page's range of keys looked at before its rows are probed."""
        made = self._statements.get((columns, as_text, snapshot, ranged))
        if made is not None:
            return made
        assert self._table_columns is not None
        content = [c for c in columns if c not in self.key]
        revived = (
            sql.Identifier(self.deleted_column)
            if self.deleted_column is not None and self.deleted_column not in columns
            else None
        )
        """The deleted column, when a page that lands a row marked deleted must clear the mark."""
        match = sql.SQL(" AND ").join(sql.SQL("target.{0} = page.{0}").format(sql.Identifier(k)) for k in self.key)

        def guard(incoming: str) -> list[sql.Composable]:
            """What lets ``incoming``'s row overwrite the stored one (``target``): not older, and different."""
            parts: list[sql.Composable] = []
            if self.version is not None:
                parts.append(
                    sql.SQL("(target.{0} IS NULL OR target.{0} <= {1}.{0})").format(
                        sql.Identifier(self.version), sql.Identifier(incoming)
                    )
                )
            if self.compare and content:
                changed: sql.Composable = sql.SQL("ROW({}) IS DISTINCT FROM ROW({})").format(
                    _column_list(content, "target"), _column_list(content, incoming)
                )
                if revived is not None:  # a row marked deleted that comes back is written, to clear its mark
                    changed = sql.SQL("({} OR target.{} IS NOT NULL)").format(changed, revived)
                parts.append(changed)
            return parts

        stale: sql.Composable = (
            sql.SQL("target.{0} > page.{0}").format(sql.Identifier(self.version))
            if self.version is not None
            else sql.SQL("false")
        )
        if content:
            assignments = [sql.SQL("{0} = excluded.{0}").format(sql.Identifier(c)) for c in content]
            if revived is not None:
                assignments.append(sql.SQL("{} = NULL").format(revived))
            on_conflict: sql.Composable = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(assignments))
            if guard("excluded"):
                on_conflict = sql.SQL("{} WHERE {}").format(on_conflict, sql.SQL(" AND ").join(guard("excluded")))
            write: sql.Composable = sql.SQL(" AND ").join(guard("page")) if guard("page") else sql.SQL("true")
        else:
            on_conflict = sql.SQL("DO NOTHING")
            write = sql.SQL("false")
        key = _column_list(self.key)
        seen = sql.SQL(_texts()["note_seen"]).format(seen=self._seen, key=key) if snapshot else sql.SQL("")
        names = dict(table=self._name, columns=_column_list(columns), key=key, seen=seen)
        names.update(self._given(columns, as_text, columns))
        probe_gate = sql.SQL(" AND ({})").format(self._stored_in_page_range()) if ranged else sql.SQL("")
        made = (
            sql.SQL(_texts()["land_page"])
            .format(**names, on_conflict=on_conflict, match=match, stale=stale, write=write, probe_gate=probe_gate)
            .as_bytes(conn),
            sql.SQL(_texts()["upsert_page"])
            .format(**names, on_conflict=on_conflict, match=match, stale=stale)
            .as_bytes(conn),
        )
        self._statements[(columns, as_text, snapshot, ranged)] = made
        return made

    def _given(
        self, columns: tuple[str, ...], as_text: tuple[bool, ...], sent: Iterable[str]
    ) -> dict[str, sql.Composable]:
        """The page's ``sent`` columns as a select from its arrays (``values``, ``arrays``, ``array_columns``): each
        column one array parameter, the owner column one value."""
        assert self._table_columns is not None
        arrays: list[sql.Composable] = []
        array_columns: list[str] = []
        values: list[sql.Composable] = []
        for number, (name, text) in enumerate(zip(columns, as_text, strict=True)):
            if name not in sent:
                continue
            column, type_name = sql.Identifier(name), sql.SQL(self._table_columns[name][0])
            if name == self.owner:
                values.append(sql.SQL("CAST({} AS {}) AS {}").format(sql.Placeholder("owner"), type_name, column))
                continue
            array_columns.append(name)
            if text:
                arrays.append(sql.SQL("{}::text[]").format(sql.Placeholder(f"c{number}", PyFormat.BINARY)))
                values.append(sql.SQL("given.{0}::{1} AS {0}").format(column, type_name))
            else:
                arrays.append(sql.SQL("{}::{}[]").format(sql.Placeholder(f"c{number}", PyFormat.BINARY), type_name))
                values.append(sql.SQL("given.{}").format(column))
        if not arrays:  # the owner column alone: one row
            arrays, array_columns = [sql.SQL("ARRAY[true]")], ["synclane_row"]
        return dict(
            arrays=sql.SQL(", ").join(arrays),
            array_columns=_column_list(array_columns),
            values=sql.SQL(", ").join(values),
        )

    def _stored_in_page_range(self) -> sql.Composable:
        assert self._table_columns is not None
        key = _column_list(self.key)
        if all(self._table_columns[k][0] in _WITH_MIN_AND_MAX for k in self.key):
            lowest, highest = (
                sql.SQL("SELECT {} FROM given").format(
                    sql.SQL(", ").join(sql.SQL(f"{bound}({{0}}) AS {{0}}").format(sql.Identifier(k)) for k in self.key)
                )
                for bound in ("min", "max")
            )
        else:
            lowest = sql.SQL("SELECT {0} FROM given ORDER BY {0} LIMIT 1").format(key)
            highest = sql.SQL("SELECT {} FROM given ORDER BY {} LIMIT 1").format(
                key, sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(k)) for k in self.key)
            )
        return sql.SQL(_texts()["stored_in_page_range"]).format(
            table=self._name,
            target_key=_column_list(self.key, "target"),
            lowest=_column_list(self.key, "lowest"),
            highest=_column_list(self.key, "highest"),
            lowest_of_page=lowest,
            highest_of_page=highest,
        )

    def _copy_statements(self, conn: psycopg.Connection[Any], columns: tuple[str, ...]) -> tuple[bytes, bytes]:
        """``page_range_stored`` (the key columns sent, in binary) and ``copy_page`` for a page of these columns."""
        made = self._statements.get((columns, (), False, True))
        if made is None:
            given = self._given(columns, (False,) * len(columns), self.key)
            made = (
                sql.SQL(_texts()["page_range_stored"])
                .format(**given, stored_in_page_range=self._stored_in_page_range())
                .as_bytes(conn),
                sql.SQL(_texts()["copy_page"]).format(table=self._name, columns=_column_list(columns)).as_bytes(conn),
            )
            self._statements[(columns, (), False, True)] = made
        return made

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            if self._connect is not None:
                conn = self._connect()
                conn.autocommit = True
            elif self._conninfo is not None:
                conn = psycopg.connect(self._conninfo, autocommit=True, application_name="synclane-landing")
            else:
                raise LandingError(
                    f"{self.table}: declared in the jobs database, and landed outside a worker's page "
                    "(give conninfo or connect to land elsewhere)"
                )
            self._local.conn = conn
            with self._lock:
                self._opened = [c for c in self._opened if not c.closed] + [conn]
        return conn


class PageTransaction:
    """A worker slot's connection to the jobs database for landing pages, and the transaction of the page in flight.

    The first :meth:`Destination.land` of a page opens the transaction (and, the first time, the connection); the
    worker then saves the job's cursor in it and commits (:meth:`save_page`, :meth:`finish`), or rolls it back
    when the page failed or the lease was lost. The rows and the cursor commit together, or neither does.
    """

    def __init__(self, database: Database) -> None:
        self._database = database
        self._conn: psycopg.Connection[Any] | None = None
        self.open = False
        """Whether a page wrote in the transaction, which is still to commit or roll back."""

    def connection(self) -> psycopg.Connection[Any]:
        """The connection, in the page's transaction (opened by its first statement)."""
        if self._conn is None or self._conn.closed:
            self._conn = self._database.connect()
            self._conn.autocommit = False
        self.open = True
        return self._conn

    def store(self) -> Store:
        """The jobs table inside the page's transaction: a statement that fails is never sent again on another
        connection (the rows it should commit with would be lost), it fails the page."""
        assert self._conn is not None
        return Store(Session.pinned(self._database, self._conn))

    def save_page(self, job_id: int, **values: Any) -> SavedPage | None:
        """Save the cursor in the page's transaction and commit it; None (nothing committed) when the lease is lost."""
        return self._ended(lambda: self.store().save_page(job_id, **values))

    def finish(self, finish: Finish, **values: Any) -> Finish | None:
        """Write how the job ended in the page's transaction and commit it; None (nothing committed) when the lease
        is lost. Takes no next job: a lost race for a lane slot would undo the page."""
        return self._ended(lambda: self.store().finish_and_take(finish=finish, take=False, **values).written)

    def _ended(self, write: Callable[[], T | None]) -> T | None:
        assert self._conn is not None
        try:
            written = write()
        except BaseException:
            self.rollback()
            raise
        if written is None:
            self.rollback()
        else:
            self._conn.commit()
            self.open = False
        return written

    def rollback(self) -> None:
        """Undo the page's writes (a failed page, a lost lease); a broken connection is dropped."""
        self.open = False
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except psycopg.Error:
                self._conn.close()

    def abandon(self) -> None:
        """Leave the connection to a page left behind, still running on it: it is never committed, and the next
        page opens a connection of its own."""
        self.open = False
        self._conn = None

    def close(self) -> None:
        conn, self._conn, self.open = self._conn, None, False
        if conn is not None:
            conn.close()
