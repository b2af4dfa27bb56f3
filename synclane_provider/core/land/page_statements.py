"""The statements that land a page in one destination table, composed from ``landing.sql`` once per page shape.

``landing.sql`` holds each statement with its identifiers as placeholders; here they are filled with
:mod:`psycopg.sql` (the table, the key, the columns and their types, the guard that lets a row overwrite the
stored one) for the columns a page has and which of them are sent as text, and kept as bytes, ready to send.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import PyFormat

from synclane_provider.core.db.queries import named_statements

_WITH_MIN_AND_MAX = frozenset(
    ("smallint", "integer", "bigint", "numeric", "real", "double precision", "text", "character varying", "date")
    + ("timestamp without time zone", "timestamp with time zone")
)
"""Key column types whose page bounds are taken with min and max (ordered as their default operator class is)."""


@functools.cache
def landing_texts() -> dict[str, str]:
    """The named statements of ``landing.sql``, their identifiers still placeholders."""
    return named_statements(__package__, "landing.sql")


def column_list(names: Iterable[str], prefix: str | None = None) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(prefix, n) if prefix else sql.Identifier(n) for n in names)


class PageStatements:
    """A destination table's page statements, each composed at the first page of its shape and kept.

    ``table_columns`` are the table's columns, each one's type and whether it is sent as text (read at the first
    page); the other arguments are the destination's declaration.
    """

    def __init__(
        self,
        *,
        name: sql.Identifier,
        key: tuple[str, ...],
        version: str | None,
        compare: bool,
        owner: str | None,
        deleted_column: str | None,
        seen: sql.Identifier,
        table_columns: Mapping[str, tuple[str, bool]],
    ) -> None:
        self._name = name
        self._key = key
        self._version = version
        self._compare = compare
        self._owner = owner
        self._deleted_column = deleted_column
        self._seen = seen
        self._table_columns = table_columns
        self._made: dict[tuple[tuple[str, ...], tuple[bool, ...], bool, bool], tuple[bytes, bytes]] = {}

    def land_and_upsert(
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
        made = self._made.get((columns, as_text, snapshot, ranged))
        if made is not None:
            return made
        content = [c for c in columns if c not in self._key]
        revived = (
            sql.Identifier(self._deleted_column)
            if self._deleted_column is not None and self._deleted_column not in columns
            else None
        )
        """The deleted column, when a page that lands a row marked deleted must clear the mark."""
        match = sql.SQL(" AND ").join(sql.SQL("target.{0} = page.{0}").format(sql.Identifier(k)) for k in self._key)

        def guard(incoming: str) -> list[sql.Composable]:
            """What lets ``incoming``'s row overwrite the stored one (``target``): not older, and different."""
            parts: list[sql.Composable] = []
            if self._version is not None:
                parts.append(
                    sql.SQL("(target.{0} IS NULL OR target.{0} <= {1}.{0})").format(
                        sql.Identifier(self._version), sql.Identifier(incoming)
                    )
                )
            if self._compare and content:
                changed: sql.Composable = sql.SQL("ROW({}) IS DISTINCT FROM ROW({})").format(
                    column_list(content, "target"), column_list(content, incoming)
                )
                if revived is not None:  # a row marked deleted that comes back is written, to clear its mark
                    changed = sql.SQL("({} OR target.{} IS NOT NULL)").format(changed, revived)
                parts.append(changed)
            return parts

        stale: sql.Composable = (
            sql.SQL("target.{0} > page.{0}").format(sql.Identifier(self._version))
            if self._version is not None
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
        key = column_list(self._key)
        seen = sql.SQL(landing_texts()["note_seen"]).format(seen=self._seen, key=key) if snapshot else sql.SQL("")
        names = dict(table=self._name, columns=column_list(columns), key=key, seen=seen)
        names.update(self._given(columns, as_text, columns))
        probe_gate = sql.SQL(" AND ({})").format(self._stored_in_page_range()) if ranged else sql.SQL("")
        made = (
            sql.SQL(landing_texts()["land_page"])
            .format(**names, on_conflict=on_conflict, match=match, stale=stale, write=write, probe_gate=probe_gate)
            .as_bytes(conn),
            sql.SQL(landing_texts()["upsert_page"])
            .format(**names, on_conflict=on_conflict, match=match, stale=stale)
            .as_bytes(conn),
        )
        self._made[(columns, as_text, snapshot, ranged)] = made
        return made

    def range_and_copy(
        self, conn: psycopg.Connection[Any], columns: tuple[str, ...], *, bounds_sent: bool
    ) -> tuple[bytes, bytes]:
        """``page_range_stored`` and ``copy_page`` for a page of these columns. With ``bounds_sent`` the look takes
        the page's bounds as parameters (``low0``, ``high0``, … by key column; the owner column's is the owner),
        else the key columns' arrays, in binary, and the server takes the bounds."""
        made = self._made.get((columns, (), bounds_sent, True))
        if made is None:
            if bounds_sent:
                given: sql.Composable = sql.SQL("")
                stored = self._stored_in_page_range(bounds_sent=True)
            else:
                given = sql.SQL("WITH given AS (SELECT {values} FROM unnest({arrays}) AS given ({array_columns}))\n")
                given = given.format(**self._given(columns, (False,) * len(columns), self._key))
                stored = self._stored_in_page_range()
            made = (
                sql.SQL(landing_texts()["page_range_stored"])
                .format(given=given, stored_in_page_range=stored)
                .as_bytes(conn),
                sql.SQL(landing_texts()["copy_page"])
                .format(table=self._name, columns=column_list(columns))
                .as_bytes(conn),
            )
            self._made[(columns, (), bounds_sent, True)] = made
        return made

    def _given(
        self, columns: tuple[str, ...], as_text: tuple[bool, ...], sent: Iterable[str]
    ) -> dict[str, sql.Composable]:
        """The page's ``sent`` columns as a select from its arrays (``values``, ``arrays``, ``array_columns``): each
        column one array parameter, the owner column one value."""
        arrays: list[sql.Composable] = []
        array_columns: list[str] = []
        values: list[sql.Composable] = []
        for number, (name, text) in enumerate(zip(columns, as_text, strict=True)):
            if name not in sent:
                continue
            column, type_name = sql.Identifier(name), sql.SQL(self._table_columns[name][0])
            if name == self._owner:
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
            array_columns=column_list(array_columns),
            values=sql.SQL(", ").join(values),
        )

    def _stored_in_page_range(self, *, bounds_sent: bool = False) -> sql.Composable:
        key = column_list(self._key)
        if bounds_sent:
            lowest, highest = (
                sql.SQL("SELECT {}").format(
                    sql.SQL(", ").join(
                        sql.SQL("CAST({} AS {}) AS {}").format(
                            sql.Placeholder("owner" if k == self._owner else f"{bound}{number}"),
                            sql.SQL(self._table_columns[k][0]),
                            sql.Identifier(k),
                        )
                        for number, k in enumerate(self._key)
                    )
                )
                for bound in ("low", "high")
            )
        elif all(self._table_columns[k][0] in _WITH_MIN_AND_MAX for k in self._key):
            lowest, highest = (
                sql.SQL("SELECT {} FROM given").format(
                    sql.SQL(", ").join(sql.SQL(f"{bound}({{0}}) AS {{0}}").format(sql.Identifier(k)) for k in self._key)
                )
                for bound in ("min", "max")
            )
        else:
            lowest = sql.SQL("SELECT {0} FROM given ORDER BY {0} LIMIT 1").format(key)
            highest = sql.SQL("SELECT {} FROM given ORDER BY {} LIMIT 1").format(
                key, sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(k)) for k in self._key)
            )
        return sql.SQL(landing_texts()["stored_in_page_range"]).format(
            table=self._name,
            target_key=column_list(self._key, "target"),
            lowest=column_list(self._key, "lowest"),
            highest=column_list(self._key, "highest"),
            lowest_of_page=lowest,
            highest_of_page=highest,
        )
