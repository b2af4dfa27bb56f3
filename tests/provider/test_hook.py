"""The hook: an Airflow connection (type synclane, or a plain postgres one) becomes the engine's database."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from synclane_provider.core import Operations
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.operators.plan import SyncLanePlanOperator
from tests.provider.conftest import DECLARATION
from tests.support import provider_declaration as decl

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize("conn_type", ["synclane", "postgres"])
def test_both_connection_types_give_the_engine_its_database(provider_schema, connection, conn_type):
    hook = SyncLaneHook(synclane_conn_id=connection(conn_type=conn_type))
    with Operations(decl.synclane, hook.get_database(decl.synclane)) as ops:
        start = datetime.now(timezone.utc)
        planned = ops.plan("shops").total
        assert planned in decl.planned_between(start, datetime.now(timezone.utc))

    async def count() -> int:
        conn = await hook.connect_async()
        async with conn:
            cur = await conn.execute(f'SELECT count(*) FROM "{provider_schema}".jobs')
            return (await cur.fetchone())[0]

    assert asyncio.run(count()) == planned


def test_the_default_connection_is_synclane_default_given_as_a_url(provider_schema):
    hook = SyncLaneHook()
    assert hook.get_conn_id() == "synclane_default"
    assert hook.connection.conn_type == "postgres"
    with Operations(decl.synclane, hook.get_database(decl.synclane)) as ops:
        assert ops.activity("shops").due is False


def test_making_the_hook_and_the_database_opens_nothing():
    # A connection id that does not exist: only using it fails.
    hook = SyncLaneHook(synclane_conn_id="synclane_nowhere")
    database = hook.get_database(decl.synclane)
    with pytest.raises(Exception, match="synclane_nowhere"):
        database.connect()


def test_credentials_never_reach_the_task_log(provider_schema, connection, capsys):
    secret = "s3cret-Pa55word-never-logged"  # the test server trusts local connections, so any password works
    conn_id = connection(password=secret)
    SyncLanePlanOperator(
        task_id="plan", declaration=DECLARATION, synclane_queue="shops", synclane_conn_id=conn_id
    ).execute({})
    captured = capsys.readouterr()
    assert "job(s) inserted" in captured.out
    assert secret not in captured.out + captured.err


def test_connections_are_named_and_time_out_unless_the_extras_say_otherwise(provider_schema, connection):
    async def settings(hook: SyncLaneHook) -> tuple:
        conn = await hook.connect_async()
        async with conn:
            cur = await conn.execute("SELECT current_setting('application_name')")
            return (await cur.fetchone())[0], conn.info.get_parameters().get("connect_timeout")

    hook = SyncLaneHook(synclane_conn_id=connection())
    with hook.get_conn() as conn:
        assert conn.execute("SELECT current_setting('application_name')").fetchone()[0] == "synclane-worker"
        assert conn.info.get_parameters()["connect_timeout"] == "10"
    assert asyncio.run(settings(hook)) == ("synclane-trigger", "10")
    named = SyncLaneHook(synclane_conn_id=connection(application_name="nightly-sync", connect_timeout=3))
    with named.get_conn() as conn:
        assert conn.execute("SELECT current_setting('application_name')").fetchone()[0] == "nightly-sync"
        assert conn.info.get_parameters()["connect_timeout"] == "3"
