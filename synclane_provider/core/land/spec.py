"""A destination table as declared: a frozen spec, checked when it is made, never at the first page.

:class:`DestinationSpec` says which table the records land in and how they are matched, compared, owned and
deleted; :class:`~synclane_provider.core.land.destination.Destination` is the code that lands a page by it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from synclane_provider.core.errors import DeclarationError


@dataclass(frozen=True)
class DestinationSpec:
    """A PostgreSQL table that pages of records land in, matched on ``key`` (see ``Destination`` for each field).

    Made with bad values it raises a :class:`~synclane_provider.core.errors.DeclarationError` naming the value.
    """

    table: str
    key: Sequence[str]
    version: str | None = None
    compare: bool = True
    owner: str | None = None
    conninfo: str | None = None
    connect: Callable[[], psycopg.Connection[Any]] | None = None
    deletions: str | None = None
    deleted_column: str | None = None
    deletion_share: float = 0.5

    def __post_init__(self) -> None:
        parts = self.table.split(".") if isinstance(self.table, str) else []
        if not 1 <= len(parts) <= 2 or not all(parts):
            raise DeclarationError(f"table must be 'name' or 'schema.name', not {self.table!r}")
        key = tuple((self.key,) if isinstance(self.key, str) else self.key)
        if not key or not all(isinstance(k, str) and k for k in key) or len(set(key)) != len(key):
            raise DeclarationError(f"key must be one or more distinct column names, not {key!r}")
        object.__setattr__(self, "key", key)
        for what, name in (("version", self.version), ("owner", self.owner)):
            if name is not None and (not isinstance(name, str) or not name):
                raise DeclarationError(f"{what} must be a column name, not {name!r}")
        if self.version is not None and self.version in key:
            raise DeclarationError(f"the version column {self.version!r} cannot be part of the key {key!r}")
        if self.conninfo is not None and self.connect is not None:
            raise DeclarationError("give at most one of conninfo or connect")
        if self.deletions not in (None, "delete", "mark"):
            raise DeclarationError(f"deletions must be 'delete', 'mark' or None, not {self.deletions!r}")
        if self.deletions is not None and self.owner is None:
            raise DeclarationError(
                "deletions need the owner column: a snapshot deletes its owner's rows it did not see"
            )
        if (self.deletions == "mark") != (self.deleted_column is not None):
            raise DeclarationError(
                "deletions='mark' needs deleted_column (a timestamptz column), and only it takes one"
            )
        share = self.deletion_share
        if not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise DeclarationError(f"deletion_share must be a share above 0 and at most 1, not {share!r}")
        object.__setattr__(self, "deletion_share", float(share))

    @property
    def in_jobs_database(self) -> bool:
        """Declared without a database of its own: the table is in the jobs database, and a worker lands each page
        in the transaction that saves the job's cursor (exactly once)."""
        return self.conninfo is None and self.connect is None

    @property
    def name(self) -> sql.Identifier:
        """The table, as an identifier."""
        return sql.Identifier(*self.table.split("."))

    @property
    def seen(self) -> sql.Identifier:
        """Where a snapshot's pages note the keys they landed, by job, until it completes."""
        *schema, table = self.table.split(".")
        return sql.Identifier(*schema, f"synclane_seen_{table}"[:63])

    @property
    def seen_index(self) -> sql.Identifier:
        """The index of :attr:`seen` on its job."""
        return sql.Identifier(f"synclane_seen_{self.table.split('.')[-1]}_job"[:63])
