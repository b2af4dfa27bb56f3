"""The hook: turns an Airflow connection into the engine's database, sync for workers and async for triggers.

It is the PostgreSQL provider's hook with its own connection id and type, so
a connection of type ``synclane`` or a plain ``postgres`` one both work, and
everything the PostgreSQL hook understands in a connection (extras such as
``sslmode``, IAM tokens) applies. Nothing is opened until a task runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from airflow.providers.postgres.hooks.postgres import PostgresHook
from psycopg.conninfo import make_conninfo

from synclane_provider.core import Database, SyncLane
from synclane_provider.core.errors import ConnectionTypeError
from synclane_provider.masking import join_airflow_masker


class SyncLaneHook(PostgresHook):
    """Gives the engine its connection to the jobs table from an Airflow connection.

    :param synclane_conn_id: the Airflow connection to the database holding the
        jobs table (type ``synclane`` or ``postgres``).
    """

    conn_name_attr = "synclane_conn_id"
    default_conn_name = "synclane_default"
    conn_type = "synclane"
    hook_name = "SyncLane"
    accepted_conn_types = ("synclane", "postgres", "postgresql")
    """The connection types that name a PostgreSQL database (``postgresql`` as a JSON connection may spell it)."""

    def _postgres_only(self, conn: Any) -> Any:
        """``conn``, if its type names a PostgreSQL database. Any other type (an ``http`` connection given by
        mistake) would still be handed to libpq, which fills what it lacks with defaults (the OS user, a
        database of that name) and connects somewhere unintended: it is refused before any connection."""
        if conn.conn_type not in self.accepted_conn_types:
            raise ConnectionTypeError(
                f"connection {conn.conn_id!r} is of type {conn.conn_type!r}: the jobs table needs a connection of "
                f"type {' or '.join(self.accepted_conn_types[:2])} (--conn-id, [synclane] conn_id)"
            )
        return conn

    def get_conn(self) -> Any:
        """The PostgreSQL hook's connection, once the Airflow connection's type is known to be PostgreSQL."""
        self._postgres_only(self.connection)
        return super().get_conn()

    def get_database(self, synclane: SyncLane) -> Database:
        """The engine's view of the table: a new psycopg connection per session, made by the PostgreSQL hook.

        The connection details are read when the first session connects, not
        here, so calling this at DAG parse time would still open nothing. Airflow's secrets masker is joined
        to the engine's redaction here, before the engine stores or shows any error.
        """
        join_airflow_masker()
        return synclane.database(connect=self.get_conn)

    def conninfo(self) -> str:
        """The connection as a libpq conninfo string, for tools that connect on their own (``airflow synclane
        schema`` hands it to the schema command). No IAM token: such a connection goes through ``get_conn``."""
        conn = self._postgres_only(self.get_connection(self.get_conn_id()))
        kwargs: dict[str, Any] = {
            "host": conn.host,
            "user": conn.login,
            "password": conn.password,
            "dbname": self.database or conn.schema,
            "port": conn.port,
        }
        for name, value in conn.extra_dejson.items():
            if name not in self.ignored_extra_options and name != "iam":
                kwargs[name] = value
        kwargs.setdefault("connect_timeout", 10)  # as get_conn: an unreachable host fails in seconds
        return make_conninfo(**{k: v for k, v in kwargs.items() if v not in (None, "")})

    async def connect_async(self) -> psycopg.AsyncConnection:
        """An autocommit async connection (for triggers), built from the same connection fields as ``get_conn``.

        The Airflow connection is read with ``aget_connection`` so the
        triggerer's event loop is never blocked on a secrets backend.
        """
        conn = self._postgres_only(await self.aget_connection(self.get_conn_id()))
        return await psycopg.AsyncConnection.connect(**await self._connect_kwargs(conn), autocommit=True)

    def _create_connection(self, conn_args: dict[str, Any]) -> Any:
        """The PostgreSQL hook's connection, with a connect timeout and a name to find it by in ``pg_stat_activity``.

        Without a timeout a worker would hang on an unreachable host instead of
        backing off and reporting it; both can be overridden in the extras.
        """
        conn_args.setdefault("connect_timeout", 10)
        conn_args.setdefault("application_name", "synclane-worker")
        return super()._create_connection(conn_args)

    async def _connect_kwargs(self, conn: Any) -> dict[str, Any]:
        """What ``get_conn`` would pass to psycopg (it is sync-only, so triggers cannot call it)."""
        login, password, port = conn.login, conn.password, conn.port
        if conn.extra_dejson.get("iam", False):
            login, password, port = await asyncio.to_thread(self.get_iam_token, conn)
        kwargs: dict[str, Any] = {
            "host": conn.host,
            "user": login,
            "password": password,
            "dbname": self.database or conn.schema,  # PostgresHook keeps its database argument here
            "port": port,
        }
        if self.options:
            kwargs["options"] = self.options
        for name, value in conn.extra_dejson.items():
            if name not in self.ignored_extra_options:
                kwargs[name] = value
        kwargs.setdefault("connect_timeout", 10)  # an unreachable host fails in seconds, then the caller backs off
        kwargs.setdefault("application_name", "synclane-trigger")
        return {name: value for name, value in kwargs.items() if value is not None}
