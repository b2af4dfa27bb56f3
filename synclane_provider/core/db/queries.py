"""Loads ``queries.sql`` (and the engine's other statement files) once and hands out statements by name, bound to a schema."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from psycopg import sql

_HEADER = re.compile(r"^-- (?P<kind>name|fragment): (?P<name>\w+)\s*$", re.MULTILINE)


def named_statements(package: str, source: str) -> dict[str, str]:
    """The statements of a file ``source`` in ``package``, each under its ``-- name: <name>`` header.

    A part the file repeats in several statements is written once under a ``-- fragment: <name>`` header and
    stands as ``{<name>}`` where it is used; each statement is given back with its fragments in place, so what
    is sent is what a statement written out whole would be. A name given twice is an error (the second would
    silently win), and so is a fragment no statement uses. The demo's own tables use the same format.
    """
    text = resources.files(package).joinpath(source).read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    # parts: [preamble, kind1, name1, body1, kind2, name2, body2, ...]
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in statements or name in fragments:
            raise RuntimeError(f"{source} names {name!r} twice")
        (fragments if kind == "fragment" else statements)[name] = body.strip().rstrip(";")
    for name, fragment in fragments.items():
        placeholder = "{" + name + "}"
        if not any(placeholder in body for body in statements.values()):
            raise RuntimeError(f"{source} defines the fragment {name!r} but no statement uses it")
        statements = {key: body.replace(placeholder, fragment) for key, body in statements.items()}
    return statements


@functools.cache
def _texts(source: str = "queries.sql") -> dict[str, str]:
    return named_statements(__package__, source)


@dataclass(frozen=True)
class Statement:
    """A named statement ready to send: PostgreSQL's own ``$1, $2 …`` placeholders, and the names they stand for.

    Statements are written with named placeholders (``%(queue)s``) and
    converted once, here; connections use psycopg's raw cursors, so nothing
    is parsed again per execution (the driver only caches that parsing for
    statements under 4 kB, and the take is longer).
    """

    name: str
    text: bytes
    parameters: tuple[str, ...]

    def arguments(self, values: Mapping[str, Any]) -> list[Any]:
        """The values in placeholder order; a missing one is an error naming it."""
        try:
            return [values[parameter] for parameter in self.parameters]
        except KeyError as missing:
            raise TypeError(f"statement {self.name!r} needs the parameter {missing.args[0]!r}") from None


_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@functools.cache
def statement(name: str, schema: str, source: str = "queries.sql") -> Statement:
    """The statement called ``name`` in ``source`` with ``{schema}`` replaced by the quoted identifier, without comments."""
    lines = (line.strip() for line in _texts(source)[name].splitlines())
    compact = "\n".join(line for line in lines if line and not line.startswith("--"))
    parameters: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in parameters:
            parameters.append(match.group(1))
        return f"${parameters.index(match.group(1)) + 1}"

    numbered = _PLACEHOLDER.sub(number, compact)
    if "%" in numbered:
        raise RuntimeError(f"statement {name!r} has a placeholder other than %(name)s")
    text = sql.SQL(numbered).format(schema=sql.Identifier(schema)).as_bytes(None)
    return Statement(name, text, tuple(parameters))
