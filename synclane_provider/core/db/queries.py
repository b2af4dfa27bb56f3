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


def named_statements(package: str, source: str, *, borrowed: Mapping[str, str] | None = None) -> dict[str, str]:
    """The statements of a file ``source`` in ``package``, each under its ``-- name: <name>`` header.

    A part the file repeats in several statements is written once under a ``-- fragment: <name>`` header and
    stands as ``{<name>}`` where it is used (in a statement, or in another fragment); each statement is given
    back with its fragments in place, so what is sent is what a statement written out whole would be.
    ``borrowed`` are another file's fragments that this file's statements may name as well (a rule written once
    for the engine's statement files, see :func:`fragments_of`). A name given twice is an error (the second would
    silently win), and so is a fragment no statement uses. The demo's own tables use the same format.
    """
    statements, fragments = _parts(package, source)
    for name in fragments:
        placeholder = "{" + name + "}"
        users = [*statements.values(), *(body for other, body in fragments.items() if other != name)]
        if not any(placeholder in body for body in users):
            raise RuntimeError(f"{source} defines the fragment {name!r} but no statement uses it")
    borrowed = borrowed or {}
    clash = sorted(set(fragments) & set(borrowed))
    if clash:
        raise RuntimeError(f"{source} names {clash[0]!r} twice: a fragment of its own, and one it borrows")
    parts = {**borrowed, **fragments}
    for _ in range(len(parts)):  # a fragment named in a fragment: in place before that one is put in a statement
        parts = {key: _put_in(body, parts) for key, body in parts.items()}
    return {key: _put_in(body, parts) for key, body in statements.items()}


def fragments_of(package: str, source: str) -> dict[str, str]:
    """The fragments of a file ``source`` in ``package``, by name, as written (for another file to borrow)."""
    return _parts(package, source)[1]


def _parts(package: str, source: str) -> tuple[dict[str, str], dict[str, str]]:
    """The statements and the fragments of a file, each by name, as written."""
    text = resources.files(package).joinpath(source).read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    # parts: [preamble, kind1, name1, body1, kind2, name2, body2, ...]
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in statements or name in fragments:
            raise RuntimeError(f"{source} names {name!r} twice")
        (fragments if kind == "fragment" else statements)[name] = body.strip().rstrip(";")
    return statements, fragments


def _put_in(body: str, fragments: Mapping[str, str]) -> str:
    for name, fragment in fragments.items():
        body = body.replace("{" + name + "}", fragment)
    return body


RULES = "queries.sql"
"""The statement file whose fragments the engine's other statement files may name too (``monitor.sql`` reads an
owner's freshness by the rule ``queries.sql`` writes down once)."""


@functools.cache
def _texts(source: str = RULES) -> dict[str, str]:
    borrowed = None if source == RULES else fragments_of(__package__, RULES)
    return named_statements(__package__, source, borrowed=borrowed)


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
