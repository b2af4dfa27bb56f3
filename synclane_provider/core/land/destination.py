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
and its rows go in by ``COPY`` in binary, which a key inserted meanwhile by another transaction undoes and sends
back to ``land_page``: to a savepoint in the caller's transaction, whole when the copy is a statement of its own
(a page landed in another database commits with the one statement that writes it). The table must have a unique
index on the key (ON CONFLICT needs it); the first page checks that, and that every column named exists, and
refuses with a :class:`~synclane_provider.core.errors.LandingError` naming what is missing.

Beside it: ``spec`` holds the declaration (:class:`DestinationSpec`, frozen and checked), ``page_rows`` checks a
page's rows and converts its values, and ``page_statements`` composes the statements for a page of given columns.
Of the worker, a page's landing knows only the job's page context
(:class:`~synclane_provider.core.page_context.PageContext`): the transaction a page landed in the jobs database
commits in with its cursor, and where its counts go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from synclane_provider.core.errors import DeletionsRefused, LandingError
from synclane_provider.core.land.page_rows import (
    Row,
    as_json,
    checked_page,
    copy_types,
    kinds_of,
    one_scalar_kind,
    page_bounds,
    values_as_text,
)
from synclane_provider.core.land.page_statements import PageStatements, column_list, landing_texts
from synclane_provider.core.land.spec import DestinationSpec
from synclane_provider.core.page_context import page_context
from synclane_provider.core.records import Job, LandCounts

__all__ = ["Destination", "DestinationSpec", "LandCounts", "Row"]

_SAVEPOINT = b"SAVEPOINT synclane_land_page"
_ROLLBACK_TO_SAVEPOINT = b"ROLLBACK TO SAVEPOINT synclane_land_page"
_RELEASE_SAVEPOINT = b"RELEASE SAVEPOINT synclane_land_page"


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
        self.spec = DestinationSpec(
            table,
            key,
            version=version,
            compare=compare,
            owner=owner,
            conninfo=conninfo,
            connect=connect,
            deletions=deletions,
            deleted_column=deleted_column,
            deletion_share=deletion_share,
        )
        """The declaration: what lands where, checked (see :class:`DestinationSpec`)."""
        spec = self.spec
        self.table = spec.table
        self.key = tuple(spec.key)
        self.version = spec.version
        self.compare = spec.compare
        self.owner = spec.owner
        self.deletions = spec.deletions
        self.deleted_column = spec.deleted_column
        self.deletion_share = spec.deletion_share
        self._seen = spec.seen
        self._seen_index = spec.seen_index
        self._name = spec.name
        self._table_columns: dict[str, tuple[str, bool]] | None = None
        """The table's columns, each one's type and whether it is sent as text, read at the first page."""
        self._ranged = False
        """Whether a unique index on the key orders keys as comparing them does (read at the first page): then a
        page whose range of keys holds no stored key is inserted without a probe a row."""
        self._bounded = False
        """Whether Python compares the key's values as its index orders them (read at the first page): then a page's
        bounds are taken here, and only they are sent to look at its range."""
        self._copied_as: dict[str, int] = {}
        """The type each column's values are copied as (its own, text for a string type)."""
        self._copies = True
        """Whether a page of new keys may be copied (a table that refused a COPY other than on a key is not)."""
        self._statements: PageStatements | None = None
        """The page statements, composed for the table read at the first page."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._opened: list[psycopg.Connection[Any]] = []

    def __repr__(self) -> str:
        return f"Destination({self.table!r}, key={self.key!r}, version={self.version!r}, compare={self.compare!r})"

    @property
    def in_jobs_database(self) -> bool:
        """Declared without a database of its own: the table is in the jobs database, and a worker lands each page
        in the transaction that saves the job's cursor (exactly once)."""
        return self.spec.in_jobs_database

    def land(self, job: Job, rows: Iterable[Row], *, complete: bool = False) -> LandCounts:
        r"""Land one page of ``job``'s records (mappings of column to value); what it did.

        With deletions declared, each page notes the keys it landed, and the page that ``complete``\ s the
        snapshot (its last: the handler returns no next cursor) deletes, or marks deleted, the owner's rows
        none of its pages saw -- unless it saw nothing at all, or more than ``deletion_share`` of the owner's
        rows would go: then it raises :class:`~synclane_provider.core.errors.DeletionsRefused` (a
        :class:`~synclane_provider.core.errors.LandingError`) naming both counts, nothing of the page is written,
        and the job ends abandoned at once, at the cursor before this page (a retry would only be refused
        again); a requeue with ``force_deletions`` fetches the page again and goes ahead.

        In the jobs database, run by a worker, the rows are written in the page's transaction, which commits with
        the job's cursor and count, fenced on its lease: the page lands exactly once, and not at all when the
        job was taken over meanwhile. In another database they are committed now, by the one statement that lands
        them (the page that completes a snapshot with deletions commits them with its rows): a page cut off before
        its cursor is saved lands again, which the key, the version guard and the content comparison make
        harmless.

        Run by a worker, what it did is added to the job's counts (``inserted_count`` … ``deleted_count`` on its
        row), written by the statement that saves the page's cursor or completes the job: a page whose cursor is
        not saved (it failed, its lease was lost) counts nothing, and a retry adds what its pages land.
        """
        page = page_context(job)
        in_page = page.transaction() if self.in_jobs_database else None
        if in_page is not None:
            counts = self._land(in_page, job, rows, complete)
        else:
            conn = self._connection()
            try:
                if self.deletions is not None and complete:
                    with conn.transaction():  # the last page and the deletions it leads to, together or not at all
                        counts = self._land(conn, job, rows, complete)
                else:  # one statement (a copy, or land_page), which commits on its own: no round trips around it
                    counts = self._land(conn, job, rows, complete)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self._local.conn = None
                conn.close()
                raise
        page.count_landed(counts)  # a worker adds them to the job's row with the page's cursor
        return counts

    def _land(self, conn: psycopg.Connection[Any], job: Job, rows: Iterable[Row], complete: bool) -> LandCounts:
        counts = self.write(conn, rows, owner=job.owner, job_id=job.id if self.deletions else None)
        if self.deletions is not None and complete:
            counts += LandCounts(deleted=self._delete_unseen(conn, job))
        return counts

    def write(
        self, conn: psycopg.Connection[Any], rows: Iterable[Row], *, owner: str | None, job_id: int | None = None
    ) -> LandCounts:
        """Land ``rows`` on ``conn`` inside the caller's transaction, which commits or rolls back with them; on an
        autocommit connection outside a transaction, the one statement that writes them commits them.

        Rows of the same key in one page are landed once: the newest by the version column (the last one when
        there is none or they tie); the others count as stale.
        """
        arrays, columns, count, superseded = checked_page(
            self.table, rows, owner, key=self.key, owner_column=self.owner, version=self.version
        )
        if not count:
            return LandCounts(stale=superseded)
        types = self._check(conn, columns)
        as_json(arrays, {name: types[name][0] for name in arrays})
        statements = self._statements
        assert statements is not None
        # The owner column is the same in every row: it goes as one value, every other column as one array.
        kinds = {name: kinds_of(values) for name, values in arrays.items()}
        as_text = tuple(name != self.owner and (types[name][1] or not one_scalar_kind(kinds[name])) for name in columns)
        params: dict[str, Any] = {"job": job_id, "owner": owner}
        for number, (name, text) in enumerate(zip(columns, as_text, strict=True)):
            if name != self.owner:
                params[f"c{number}"] = values_as_text(conn, arrays[name]) if text else arrays[name]
        # The page's range of keys is looked at first when the last page this thread landed was all new keys (a
        # first landing in key order): one probe for the page instead of one a row.
        ranged = (
            self._ranged
            and getattr(self._local, "all_new", True)
            and all(None not in arrays[name] for name in self.key if name != self.owner)
        )
        copied_as = (
            copy_types(conn, columns, arrays, kinds, owner, owner_column=self.owner, copied_as=self._copied_as)
            if ranged and job_id is None and self._copies and not any(as_text)
            else None
        )
        land_page, upsert_page = statements.land_and_upsert(
            conn, columns, as_text, snapshot=job_id is not None, ranged=ranged and copied_as is None
        )
        in_transaction = not (conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE)
        # Named parameters, whatever cursors the connection makes; the savepoint (of the caller's transaction, never
        # one of its own, which would commit) and its release go in the statement's round trip.
        with psycopg.Cursor(conn, row_factory=tuple_row) as cur, psycopg.Cursor(conn) as savepoint:
            if copied_as is not None:  # all new keys, as a first landing in key order has: copied, no probe at all
                bounds = page_bounds(arrays, self.key, owner_column=self.owner) if self._bounded else None
                page_range_stored, copy_page = statements.range_and_copy(conn, columns, bounds_sent=bounds is not None)
                look = params if bounds is None else {"owner": owner, **bounds}
                if in_transaction:
                    with conn.pipeline():  # the savepoint the copy may go back to, in the look's round trip
                        savepoint.execute(_SAVEPOINT)
                        cur.execute(page_range_stored, look)
                else:  # the copy is a transaction of its own, which a key stored meanwhile undoes whole
                    cur.execute(page_range_stored, look)
                stored = cur.fetchone()
                assert stored is not None
                copied = None if stored[0] else self._copy(cur, savepoint, copy_page, copied_as, columns, arrays, owner)
                if copied is not None:  # a row a trigger of the table skipped is not inserted: left as it was
                    self._local.all_new = True
                    return LandCounts(inserted=copied, unchanged=count - copied, stale=superseded)
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
        self._local.all_new = inserted == count
        return LandCounts(
            inserted=inserted,
            updated=updated,
            unchanged=count - inserted - updated - stale,
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

    def _delete_unseen(self, conn: psycopg.Connection[Any], job: Job) -> int:
        """Delete (or mark) the owner's rows the snapshot ``job`` did not see, within the share; the rows gone."""
        assert self.owner is not None
        names = dict(
            seen=self._seen,
            table=self._name,
            key=column_list(self.key),
            owner_column=sql.Identifier(self.owner),
            owner=sql.Literal(job.owner),
            job=sql.Literal(job.id),
            match=sql.SQL(" AND ").join(sql.SQL("s.{0} = t.{0}").format(sql.Identifier(k)) for k in self.key),
            live=sql.SQL("t.{} IS NULL").format(sql.Identifier(self.deleted_column))
            if self.deleted_column is not None
            else sql.SQL("true"),
        )
        with conn.cursor(row_factory=tuple_row) as cur:
            counted = cur.execute(sql.SQL(landing_texts()["unseen_counts"]).format(**names)).fetchone()
            assert counted is not None
            seen, unseen, stored = (int(n) for n in counted)
            share = f"{self.deletion_share:.0%}"
            if not job.force_deletions and unseen and (seen == 0 or unseen > self.deletion_share * stored):
                why = "it saw none of them" if seen == 0 else f"more than the declared share ({share})"
                raise DeletionsRefused(
                    f"{self.table}: the snapshot of {job.owner} saw {seen} row(s) and would delete {unseen} of the "
                    f"owner's {stored} row(s), {why}; nothing deleted, and the job waits for a person "
                    "(requeue the job with force_deletions to delete them)"
                )
            if self.deleted_column is None:
                statement = landing_texts()["delete_unseen"]
            else:
                statement = landing_texts()["mark_unseen"]
                names["deleted"] = sql.Identifier(self.deleted_column)
            deleted = cur.execute(sql.SQL(statement).format(**names)).rowcount
            cur.execute(sql.SQL(landing_texts()["forget_seen"]).format(**names))
        return deleted

    def close(self) -> None:
        """Close every thread's connection (each reopens at its next page)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

    def _check(self, conn: psycopg.Connection[Any], columns: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """At the first page: the table, its columns and a unique index on the key; then each page's columns.

        The table's columns: each one's type, and whether its values are sent as text."""
        if self._table_columns is None:
            query = sql.SQL(landing_texts()["unique_indexes"]).format(
                table_name=sql.Literal(self._name.as_string(conn))
            )
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
            bounded_as_sent = dict(zip(found[0], found[6], strict=True))
            self._bounded = all(bounded_as_sent.get(k, False) for k in self.key if k != self.owner)
            if frozenset(self.key) not in unique_keys:
                raise LandingError(
                    f"table {self.table} has no unique index on the key ({', '.join(self.key)}): "
                    f"ON CONFLICT needs one (CREATE UNIQUE INDEX ON {self.table} ({', '.join(self.key)}))"
                )
            if self.deleted_column is not None and self.deleted_column not in table_columns:
                raise LandingError(f"table {self.table} has no column {self.deleted_column!r} (the deleted column)")
            if self.deletions is not None:
                self._create_seen(conn)
            self._statements = PageStatements(
                name=self._name,
                key=self.key,
                version=self.version,
                compare=self.compare,
                owner=self.owner,
                deleted_column=self.deleted_column,
                seen=self._seen,
                table_columns=table_columns,
            )
            self._table_columns = table_columns
        unknown = [name for name in columns if name not in self._table_columns]
        if unknown:
            raise LandingError(f"table {self.table} has no column {', '.join(map(repr, unknown))} (named by a row)")
        return self._table_columns

    def _create_seen(self, conn: psycopg.Connection[Any]) -> None:
        """The snapshot's table of keys seen, and its index, if missing. ``IF NOT EXISTS`` alone is not enough when
        several workers land their first pages at once: two creations of one table collide in the catalogue
        (a unique violation on its row type), so they take turns on a lock named after the table."""
        with conn.transaction():
            conn.execute(sql.SQL(landing_texts()["lock_seen"]).format(name=sql.Literal(self._seen.as_string(conn))))
            for name in ("create_seen", "index_seen"):
                conn.execute(
                    sql.SQL(landing_texts()[name]).format(
                        seen=self._seen, seen_index=self._seen_index, table=self._name, key=column_list(self.key)
                    )
                )

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            if self.spec.connect is not None:
                conn = self.spec.connect()
                conn.autocommit = True
            elif self.spec.conninfo is not None:
                conn = psycopg.connect(self.spec.conninfo, autocommit=True, application_name="synclane-landing")
            else:
                raise LandingError(
                    f"{self.table}: declared in the jobs database, and landed outside a worker's page "
                    "(give conninfo or connect to land elsewhere)"
                )
            self._local.conn = conn
            with self._lock:
                self._opened = [c for c in self._opened if not c.closed] + [conn]
        return conn
