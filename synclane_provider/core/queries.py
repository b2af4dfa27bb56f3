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
def statement(name: str, schema: str) -> bytes:
    """The statement called ``name`` with ``{schema}`` replaced by the quoted identifier, ready to send.

    Rendered once per schema, without comments and indentation: the driver
    caches the parsing of statements up to 4 kB, and the take is longer than
    that with its comments.
    """
    lines = (line.strip() for line in _texts()[name].splitlines())
    compact = "\n".join(line for line in lines if line and not line.startswith("--"))
    return sql.SQL(compact).format(schema=sql.Identifier(schema)).as_bytes(None)


def names() -> frozenset[str]:
    return frozenset(_texts())
