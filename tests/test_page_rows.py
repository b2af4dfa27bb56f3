"""What a page of new keys is copied as: only values already of their columns' types, as land_page would land them.

A copy sends each value in binary as the column's type says. A value of another Python type would be dumped as
that type or refused mid-copy, so the page goes to land_page instead, where the server casts it. These are the
choices themselves; ``test_landing.py`` lands the pages.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Json, Jsonb

from synclane_provider.core.land.page_rows import as_json, copy_types, kinds_of, one_scalar_kind

OIDS = {"int4": 23, "int8": 20, "text": 25, "timestamptz": 1184, "numeric": 1700, "date": 1082, "jsonb": 3802}


def copied(conn: psycopg.Connection, column_type: str, values: list[Any]) -> list[int] | None:
    arrays = {"c": values}
    return copy_types(
        conn, ("c",), arrays, {"c": kinds_of(values)}, None, owner_column=None, copied_as={"c": OIDS[column_type]}
    )


@pytest.mark.parametrize(
    ("column_type", "values"),
    [
        ("int4", [1, None, -(2**31), 2**31 - 1]),
        ("int8", [2**40]),
        ("text", ["a", None]),
        ("timestamptz", [datetime(2026, 12, 1, tzinfo=timezone.utc)]),
        ("numeric", [Decimal("0.1")]),
        ("date", [date(2026, 12, 1)]),
        ("text", [None, None]),  # nothing to look at: copied as the column's type
        ("jsonb", [Jsonb({"a": [1]}), None, Jsonb(["red"])]),  # what as_json makes of a list or an object
    ],
)
def test_values_of_their_columns_type_are_copied_as_it(database_url, column_type, values):
    with psycopg.connect(database_url) as conn:
        assert copied(conn, column_type, values) == [OIDS[column_type]]


@pytest.mark.parametrize(
    ("column_type", "values"),
    [
        ("timestamptz", ["2026-12-01T00:00:00+00:00"]),  # a time as a string: the server reads it
        ("timestamptz", [date(2026, 12, 1)]),
        ("numeric", [0.1]),  # a float for numeric: land_page's cast keeps 0.1, a binary dump could not
        ("int4", [True]),
        ("text", [5]),
        ("int4", [2**31]),  # out of the column's range: a binary copy would wrap it
        ("int4", [None, -(2**31) - 1]),
        ("numeric", [1]),  # an int is copied only into an integer column
        ("jsonb", ['{"a": 1}']),  # JSON text: the server reads it
    ],
)
def test_values_of_another_type_are_not_copied(database_url, column_type, values):
    with psycopg.connect(database_url) as conn:
        assert copied(conn, column_type, values) is None


def test_a_column_of_one_python_type_or_none_is_sent_as_it_is_and_a_mixed_or_nested_one_as_text():
    assert one_scalar_kind(kinds_of([1, None, 2]))
    assert one_scalar_kind(kinds_of([None]))
    assert not one_scalar_kind(kinds_of([1, "2"]))
    assert not one_scalar_kind(kinds_of([[1], [2]]))
    assert not one_scalar_kind(kinds_of([{"a": 1}]))


def test_a_json_columns_values_are_made_json_and_no_other_columns():
    """A list, an object, a number or a bool in a json or jsonb column is sent as JSON; a string is JSON text
    already and None is NULL; a list in an array column stays a list (an array)."""
    page = {
        "doc": [{"a": 1}, ["red"], 3, True, '{"b": 2}', None],
        "raw": [["red"]],
        "tags": [["red"]],
        "text": ['{"b": 2}'],
    }
    as_json(page, {"doc": "jsonb", "raw": "json", "tags": "text[]", "text": "text"})
    assert [(type(v), getattr(v, "obj", v)) for v in page["doc"]] == [
        (Jsonb, {"a": 1}),
        (Jsonb, ["red"]),
        (Jsonb, 3),
        (Jsonb, True),
        (str, '{"b": 2}'),
        (type(None), None),
    ]
    assert [(type(v), v.obj) for v in page["raw"]] == [(Json, ["red"])]
    assert page["tags"] == [["red"]] and page["text"] == ['{"b": 2}']
