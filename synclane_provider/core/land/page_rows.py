"""A page's rows as a destination lands them: checked, one per key, and each column's values as they are sent.

A page is checked before anything is sent: every row has the first one's columns, its owner column (if it has
one) holds the job's owner, a version in every row when a version column is declared, and each key once (of a
key's rows the newest by version is kept, the others count as superseded). A json or jsonb column's values are
JSON (:func:`as_json`: a list, an object or a number as ``json.load`` gives it, a string as JSON text). Its columns
then go as one array each: as they are when the values are of one Python type that psycopg sends as it is, else as
text for the server to read as the column's type; a page of new keys is copied only when each column's values are
of the column's type already, so that a copy lands exactly what ``land_page`` would.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

import psycopg
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.json import Json, Jsonb

from synclane_provider.core.errors import LandingError

Row = Mapping[str, Any]
_JSON_TYPES: dict[str, type[Json] | type[Jsonb]] = {"json": Json, "jsonb": Jsonb}
"""The JSON column types (as format_type names them), and what a value is wrapped in to be sent as one."""
_INTEGER_LIMITS = {21: 2**15, 23: 2**31, 20: 2**63}
"""int2, int4 and int8 by type oid: the magnitude their values stay below (a COPY in binary would wrap them)."""


def checked_page(
    table: str,
    rows: Iterable[Row],
    owner: str | None,
    *,
    key: Sequence[str],
    owner_column: str | None,
    version: str | None,
) -> tuple[dict[str, list[Any]], tuple[str, ...], int, int]:
    """The page as it is sent: each column's values but the owner column's, one row per key (as given: the owner
    column, when a row leaves it out, is the job's owner); its columns, the owner column among them; how many rows
    it has; and how many rows were superseded."""
    if owner_column is not None and owner is None:
        raise LandingError(f"{table}: the owner column {owner_column!r} needs the job's owner")
    rows = rows if isinstance(rows, list) else list(rows)
    as_given = _page_as_given(rows, owner, key=key, owner_column=owner_column, version=version)
    if as_given is not None:
        return as_given
    owners: tuple[str, ...] = () if owner_column is None else (owner_column,)
    within = [k for k in key if k not in owners]  # the owner's part of the key is the same in every row
    key_of: Callable[[Row], Any] = operator.itemgetter(*within) if within else (lambda row: ())
    newest: dict[Any, Row] = {}
    columns: tuple[str, ...] = ()
    shape: set[str] = set()
    number = 0
    for number, row in enumerate(rows, 1):
        if number == 1:
            columns = (*row, *(name for name in owners if name not in row))
            shape = set(columns)
        elif row.keys() != shape and row.keys() | set(owners) != shape:
            raise LandingError(f"{table}: row {number} has columns {sorted(row)}, the first row {sorted(shape)}")
        for name in owners:
            if row.get(name, owner) != owner:
                raise LandingError(f"{table}: row {number} has {name}={row[name]!r}, not the job's owner {owner!r}")
        try:
            row_key = key_of(row)
        except KeyError as missing:
            raise LandingError(f"{table}: row {number} has no key column {missing.args[0]!r}") from None
        if version is not None:
            if row.get(version) is None:
                whole = tuple(row.get(k, owner) for k in key)
                raise LandingError(f"{table}: row {number} (key {whole!r}) has no {version!r} (the version column)")
            kept = newest.get(row_key)
            if kept is not None and kept[version] > row[version]:
                continue
        newest[row_key] = row
    kept_rows = list(newest.values())
    arrays = {name: [row[name] for row in kept_rows] for name in columns if name != owner_column}
    return arrays, columns, len(kept_rows), number - len(kept_rows)


def _page_as_given(
    rows: list[Row], owner: str | None, *, key: Sequence[str], owner_column: str | None, version: str | None
) -> tuple[dict[str, list[Any]], tuple[str, ...], int, int] | None:
    """The usual page, checked a column at a time rather than a row at a time: every row of the first one's
    columns, its owner column (if it has one) the job's owner, a version in every row and no key twice. None
    when it is not so: :func:`checked_page` then goes through the rows one by one, to name the row that is wrong
    or to keep the newest of a key's rows."""
    if not rows:
        return None
    first = rows[0]
    within = [k for k in key if k != owner_column]
    if not within and len(rows) > 1:
        return None
    try:
        # A row as wide as the first that holds each of its columns has the first one's columns.
        if not all(map(operator.eq, repeat(len(first)), map(len, rows))):
            return None
        arrays = {name: list(map(operator.itemgetter(name), rows)) for name in first if name != owner_column}
        if owner_column is not None and owner_column in first:
            if not all(map(operator.eq, repeat(owner), map(operator.itemgetter(owner_column), rows))):
                return None
        if version is not None and None in arrays[version]:
            return None
        keys = arrays[within[0]] if len(within) == 1 else list(zip(*(arrays[k] for k in within)))
        if within and len(set(keys)) != len(rows):
            return None
    except (KeyError, TypeError):  # a column missing, a key that cannot be hashed: told row by row
        return None
    owners = () if owner_column is None or owner_column in first else (owner_column,)
    return arrays, (*first, *owners), len(rows), 0


def as_json(arrays: dict[str, list[Any]], column_types: Mapping[str, str]) -> None:
    """Each json or jsonb column's values (``column_types``: each column's type, as format_type names it) made
    JSON, in place: a list, a dict, a number or a bool -- what ``json.load`` gives -- wrapped to be sent as JSON, the
    column's type (as an array it would be a PostgreSQL array literal, and a dict has no other form at all); a
    string is JSON text already (what ``json.dumps`` gives), and None is NULL. Then a column of JSON values is of
    one kind, sent and copied in binary as the column's type."""
    for name, values in arrays.items():
        wrap = _JSON_TYPES.get(column_types[name])
        if wrap is not None and not all(value is None or isinstance(value, (str, Json, Jsonb)) for value in values):
            arrays[name] = [
                value if value is None or isinstance(value, (str, Json, Jsonb)) else wrap(value) for value in values
            ]


def kinds_of(values: list[Any]) -> set[type]:
    """The Python types among a column's values, None's too: one pass over the column, which both the choice of how
    it is sent (:func:`one_scalar_kind`) and the check that it can be copied (:func:`copy_types`) read."""
    return set(map(type, values))


def one_scalar_kind(kinds: set[type]) -> bool:
    """Whether a column of values of these types (None aside) is of one Python type that is sent as it is: not a
    list, a tuple or a dict (a page's column goes as one array, and psycopg dumps an array of one type)."""
    scalar = kinds - {type(None)}
    return len(scalar) <= 1 and not any(issubclass(k, (list, tuple, dict)) for k in scalar)


def values_as_text(conn: psycopg.Connection[Any], values: list[Any]) -> list[str | None]:
    """The values as psycopg writes them in text (what COPY would send), for the server to read as the column's type."""
    transformer = Transformer(conn)
    encoding = conn.info.encoding

    def text(value: Any) -> str:
        dumped = transformer.get_dumper(value, PyFormat.TEXT).dump(value)
        assert dumped is not None
        return bytes(dumped).decode(encoding)

    return [None if v is None else text(v) for v in values]


def page_bounds(
    arrays: Mapping[str, list[Any]], key: Sequence[str], *, owner_column: str | None
) -> dict[str, Any] | None:
    """The page's least and greatest value of each key column but the owner's (``low0``, ``high0``, … by the
    column's place in the key), as Python compares them; None when it cannot (a naive time among aware ones).
    Sent only for columns whose index orders them as Python does."""
    bounds: dict[str, Any] = {}
    try:
        for number, name in enumerate(key):
            if name != owner_column:
                bounds[f"low{number}"], bounds[f"high{number}"] = min(arrays[name]), max(arrays[name])
    except TypeError:
        return None
    return bounds


def copy_types(
    conn: psycopg.Connection[Any],
    columns: tuple[str, ...],
    arrays: dict[str, list[Any]],
    kinds: Mapping[str, set[type]],
    owner: str | None,
    *,
    owner_column: str | None,
    copied_as: Mapping[str, int],
) -> list[int] | None:
    """The types to copy the page's columns as, when each column's values are of the column's type already (as
    psycopg sends them: a str for a string type, an aware datetime for timestamptz, an int in range for an
    integer type): a copy then lands exactly what land_page would. None otherwise. ``kinds`` are each column's
    Python types (:func:`kinds_of`, of one kind each: see :func:`one_scalar_kind`); ``copied_as`` is the type each
    column's values are copied as (its own, text for a string type)."""
    transformer: Any = None  # made at the first column that needs a dumper's type
    types: list[int] = []
    for name in columns:
        oid = copied_as[name]
        values: list[Any]
        kind: type
        if name == owner_column:
            values, kind = [owner], type(owner)
        else:
            values = arrays[name]
            scalar = kinds[name] - {type(None)}
            if not scalar:
                types.append(oid)
                continue
            [kind] = scalar
        if kind is int:
            limit = _INTEGER_LIMITS.get(oid)
            if limit is None:
                return None
            if type(None) in kinds.get(name, ()):
                values = [v for v in values if v is not None]
            if not -limit <= min(values) <= max(values) < limit:
                return None
        else:
            transformer = transformer or Transformer(conn)
            sample = next(v for v in values if v is not None)
            if transformer.get_dumper(sample, PyFormat.BINARY).oid != oid:
                return None
        types.append(oid)
    return types
