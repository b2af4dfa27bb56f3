"""A queue's OAuth client is the Airflow connection it names: host the token URL, login the client id, password
the client secret, extra the scopes."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import TaskDeferred
from cryptography.fernet import Fernet

from synclane_provider.core import Operations
from synclane_provider.core.credentials import Credentials, Sealer
from synclane_provider.core.errors import DeclarationError
from synclane_provider.hooks.oauth import oauth_client
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.operators.work import SyncLaneWorkOperator
from tests.support import oauth_declaration
from tests.support.helpers import declare, products, rows
from tests.support.oauth_server import OAuthServer


def queue(schema, conn_id):
    return declare(schema, products(), oauth_conn_id=conn_id).queue("shops")


def connection(monkeypatch, conn_id: str, **fields) -> None:
    """An Airflow connection given as its environment variable, the way a deployment's secrets backend may."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "http", **fields}))


def test_the_connection_named_by_the_queue_is_its_oauth_client(schema, monkeypatch):
    connection(
        monkeypatch,
        "shop_oauth",
        host="https://auth.example.com/oauth/token",
        login="app-id",
        password="app-secret",
        extra={"scopes": "orders.read products.read"},
    )
    client = oauth_client(queue(schema, "shop_oauth"))
    assert client is not None
    assert (client.token_url, client.client_id, client.client_secret, client.scopes) == (
        "https://auth.example.com/oauth/token",
        "app-id",
        "app-secret",
        "orders.read products.read",
    )
    assert "app-secret" not in repr(client)


def test_a_host_without_a_scheme_is_reached_with_the_connections_schema_and_port(schema, monkeypatch):
    connection(monkeypatch, "shop_oauth", host="127.0.0.1", port=8443, schema="http", login="app-id")
    client = oauth_client(queue(schema, "shop_oauth"))
    assert client is not None and (client.token_url, client.client_secret) == ("http://127.0.0.1:8443", None)


def test_a_queue_without_an_oauth_connection_has_no_oauth_client(schema):
    assert oauth_client(declare(schema, products()).queue("shops")) is None


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"login": "app-id"}, "the connection 'shop_oauth' (oauth_conn_id of queue 'shops') has no host"),
        ({"host": "https://auth.example.com/token"}, "has no login: set it to the app's OAuth client id"),
        (
            {"host": "https://auth.example.com/token", "login": "app-id", "extra": {"scopes": ["a", "b"]}},
            "extra scopes must be a space-separated string, got ['a', 'b']",
        ),
    ],
)
def test_a_connection_missing_what_a_refresh_needs_is_refused_naming_it(schema, monkeypatch, fields, error):
    connection(monkeypatch, "shop_oauth", **fields)
    with pytest.raises(DeclarationError, match=re.escape(error)):
        oauth_client(queue(schema, "shop_oauth"))


@pytest.mark.airflow
def test_the_worker_operator_refreshes_an_owners_token_with_the_queues_oauth_connection(
    provider_schema, admin, monkeypatch
):
    key = Fernet.generate_key().decode()
    monkeypatch.setenv("AIRFLOW__SYNCLANE__CREDENTIALS_KEY", key)
    declaration = oauth_declaration.synclane
    oauth_declaration.SENT.clear()
    with OAuthServer(lifetime=600) as server:
        connection(
            monkeypatch, "shop_oauth", host=server.token_url, login=server.client_id, password=server.client_secret
        )
        access, refresh = server.grant()
        expired = datetime.now(timezone.utc) - timedelta(minutes=1)
        with Operations(declaration, SyncLaneHook().get_database(declaration), sealer=Sealer(key)) as ops:
            ops.set_credentials(
                "tokens", "acme", Credentials("oauth", access_token=access, refresh_token=refresh, expires_at=expired)
            )
            ops.plan("tokens")
            worker = SyncLaneWorkOperator(
                task_id="work",
                declaration="tests.support.oauth_declaration:synclane",
                synclane_queue="tokens",
                idle_timeout=30,
                deferrable=True,
                linger=0,
            )
            with pytest.raises(TaskDeferred):  # done, nothing more due: it waits for the next job
                worker.execute({})
        assert [job["status"] for job in rows(admin, provider_schema, "queue = 'tokens'")] == ["completed"]
        [first, second] = oauth_declaration.SENT
        assert first == second and first != access and server.valid(first)
        assert (server.token_requests, server.invalid_grants) == (1, 0)
