"""Loads ``queries.sql`` once and hands out its statements by name, bound to a schema."""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

_HEADER = re.compile(r"^-- name: (?P<name>\w+)\s*$", re.MULTILINE)


@functools.cache
def _texts() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    statements = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in statements:
            raise RuntimeError(f"queries.sql names {name!r} twice")
        statements[name] = body.strip().rstrip(";")
    return statements


@functools.cache
def statement(name: str, schema: str) -> sql.Composed:
    """The statement called ``name`` with ``{schema}`` replaced by the quoted identifier."""
    return sql.SQL(_texts()[name]).format(schema=sql.Identifier(schema))


def names() -> frozenset[str]:
    return frozenset(_texts())
