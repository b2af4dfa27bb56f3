"""An owner's OAuth token is refreshed once, by one caller, across every process: against a real token server
that rotates refresh tokens and revokes the grant when a spent one is sent again."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.fernet import Fernet

from synclane_provider.core import Operations
from synclane_provider.core.credentials import (
    Credentials,
    CredentialsNeedReconnecting,
    Sealer,
    TokenEndpointError,
    TokenEndpointUnavailable,
)
from synclane_provider.core.run.tokens import OAuthClient, TokenSource
from tests.support.airflow_env import REPO
from tests.support.helpers import declare, owners, products
from tests.support.oauth_server import OAuthServer

KEY = Fernet.generate_key().decode()
CALLERS = 64
PROCESSES = 4
"""Token sources with nothing shared but the database, as processes on other machines have."""


@pytest.fixture
def server():
    with OAuthServer(lifetime=600) as running:
        yield running


@pytest.fixture
def declaration(schema):
    return declare(schema, products(), owner_source=owners("acme", "globex"))


@pytest.fixture
def ops(declaration, database_url):
    with Operations(declaration, declaration.database(database_url), sealer=Sealer(KEY)) as operations:
        yield operations


@pytest.fixture
def client(server) -> OAuthClient:
    return OAuthClient(server.token_url, server.client_id, server.client_secret, tries=4)


@pytest.fixture
def sources(declaration, database_url, client):
    made: list[TokenSource] = []

    def new(**settings) -> TokenSource:
        source = TokenSource(
            declaration.database(database_url),
            Sealer(KEY),
            settings.pop("client", client),
            sleep=lambda s: None,
            **settings,
        )
        made.append(source)
        return source

    yield new
    for source in made:
        source.close()


def expired_grant(ops, server, owner: str = "acme") -> str:
    """The owner's credentials as connecting gave them, their access token expired a minute ago; returns the
    refresh token."""
    access, refresh = server.grant()
    expired = datetime.now(timezone.utc) - timedelta(minutes=1)
    ops.set_credentials(
        "shops", owner, Credentials("oauth", access_token=access, refresh_token=refresh, expires_at=expired)
    )
    return refresh


def stored(ops, owner: str = "acme") -> Credentials:
    row = ops.store.sealed_credentials("shops", owner)
    return Sealer(KEY).open(row["sealed"], kind=row["kind"], expires_at=row["expires_at"], whose=owner)


def test_64_callers_of_an_expired_token_across_processes_make_exactly_one_token_request(ops, server, sources):
    refresh = expired_grant(ops, server)
    server.answer_delay = 0.3  # a slow token endpoint: every caller arrives while the refresh is in flight
    processes = [sources() for _ in range(PROCESSES)]
    start = threading.Barrier(CALLERS)
    tokens: list[str] = []
    errors: list[BaseException] = []

    def call(source: TokenSource) -> None:
        start.wait()
        try:
            tokens.append(source.credential("shops", "acme"))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(processes[i % PROCESSES],)) for i in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert server.token_requests == 1 and server.invalid_grants == 0
    assert len(tokens) == CALLERS and len(set(tokens)) == 1 and server.valid(tokens[0])
    assert not server.revoked(refresh)


def test_64_callers_in_two_processes_make_exactly_one_token_request(ops, server, schema, database_url):
    expired_grant(ops, server)
    server.answer_delay = 0.3
    program = REPO / "tests" / "support" / "token_callers.py"
    arguments = [database_url, schema, KEY, server.token_url, server.client_id, server.client_secret, str(CALLERS // 2)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = [
        subprocess.Popen(
            [sys.executable, str(program), *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout.readline().strip() == "ready"
        for process in processes:  # both released at once
            process.stdin.write("go\n")
            process.stdin.flush()
        answers = [json.loads(process.communicate(timeout=120)[0]) for process in processes]
    finally:
        for process in processes:
            process.kill()
    assert [answer["errors"] for answer in answers] == [[], []]
    tokens = {token for answer in answers for token in answer["tokens"]}
    assert sum(len(answer["tokens"]) for answer in answers) == CALLERS and len(tokens) == 1
    assert server.token_requests == 1 and server.invalid_grants == 0 and server.valid(tokens.pop())


def test_hundreds_of_refreshes_of_many_owners_from_two_processes_revoke_no_grant(
    declaration, database_url, server, sources
):
    """Tokens that expire at once: every call refreshes, one at a time per owner, each with the refresh token the
    one before it stored -- never a spent one."""
    shops = owners(*[f"shop-{n}" for n in range(20)])
    many = dataclasses.replace(declaration, queues=[dataclasses.replace(declaration.queues[0], owners=shops)])
    server.lifetime = 0
    with Operations(many, many.database(database_url), sealer=Sealer(KEY)) as ops:
        for n in range(20):
            expired_grant(ops, server, f"shop-{n}")
    processes = [sources(skew=timedelta(0)) for _ in range(2)]
    calls = 300

    def call(i: int) -> str:
        return processes[i % 2].credential("shops", f"shop-{i // 2 % 20}")  # each owner from both

    with ThreadPoolExecutor(16) as pool:
        tokens = list(pool.map(call, range(calls)))
    assert len(set(tokens)) == calls  # each call refreshed, and got a token of its own
    assert server.token_requests == calls and server.invalid_grants == 0


def test_a_process_killed_after_the_provider_answered_leaves_the_owner_needing_reconnecting(
    ops, server, schema, database_url, sources
):
    """The provider rotated the refresh token, and the process died before it could store the new one: the next
    refresh sends the spent token, the provider revokes the grant, and the owner says so -- never silently."""
    expired_grant(ops, server)
    server.stall = True
    program = REPO / "tests" / "support" / "token_callers.py"
    arguments = [database_url, schema, KEY, server.token_url, server.client_id, server.client_secret, "1"]
    caller = subprocess.Popen(
        [sys.executable, str(program), *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert caller.stdout.readline().strip() == "ready"
        caller.stdin.write("go\n")
        caller.stdin.flush()
        assert server.issued.wait(60)  # the provider has rotated: the caller holds the lock, its answer in flight
        caller.kill()
        caller.wait(30)
    finally:
        caller.kill()
        server.released.set()
    server.stall = False
    with pytest.raises(CredentialsNeedReconnecting, match="invalid_grant: refresh token reused"):
        sources().credential("shops", "acme")
    [state] = ops.credentials("shops", "acme")
    assert state.describe(datetime.now(timezone.utc)).startswith("needs reconnecting: ")
    assert server.token_requests == 2 and server.invalid_grants == 1


def test_the_rotated_refresh_token_is_stored_before_the_new_access_token_is_handed_out(ops, server, sources):
    refresh = expired_grant(ops, server)
    token = sources().credential("shops", "acme")
    kept = stored(ops)
    assert kept.access_token == token and kept.refresh_token == server.current_refresh_token(refresh) != refresh
    [state] = ops.credentials("shops", "acme")
    assert state.refreshed_at is not None and state.expires_at > datetime.now(timezone.utc) + timedelta(minutes=9)
    # the next expiry is refreshed with the rotated token, by another process: no grant is revoked
    assert sources(skew=timedelta(hours=1)).credential("shops", "acme") != token
    assert server.token_requests == 2 and server.invalid_grants == 0


def test_a_token_good_for_longer_than_the_skew_is_handed_out_without_asking(ops, server, sources):
    access, refresh = server.grant()
    later = datetime.now(timezone.utc) + timedelta(minutes=10)
    ops.set_credentials(
        "shops", "acme", Credentials("oauth", access_token=access, refresh_token=refresh, expires_at=later)
    )
    assert sources(skew=timedelta(minutes=2)).credential("shops", "acme") == access
    assert server.token_requests == 0
    assert sources(skew=timedelta(minutes=11)).credential("shops", "acme") != access  # within the skew: refreshed
    assert server.token_requests == 1


def test_an_api_key_is_handed_out_as_it_is(ops, server, sources):
    ops.set_credentials("shops", "globex", Credentials("api_key", api_key="sk_live_globex_7070"))
    assert sources().credential("shops", "globex") == "sk_live_globex_7070"
    assert server.token_requests == 0


def test_a_revoked_grant_marks_the_owner_needs_reconnecting_until_new_credentials_are_set(ops, server, sources):
    refresh = expired_grant(ops, server)
    server.revoke(refresh)
    source = sources()
    with pytest.raises(
        CredentialsNeedReconnecting,
        match="^needs reconnecting: owner 'acme' of queue 'shops': the token endpoint answered invalid_grant",
    ):
        source.credential("shops", "acme")
    [state] = ops.credentials("shops", "acme")
    assert state.needs_reconnecting_at is not None
    assert state.describe(datetime.now(timezone.utc)).startswith("needs reconnecting: ")
    with pytest.raises(CredentialsNeedReconnecting):
        source.credential("shops", "acme")
    assert server.token_requests == 1  # asked once: the state is read, the endpoint not asked again

    expired_grant(ops, server)  # a person reconnects the account
    assert server.valid(source.credential("shops", "acme"))
    [state] = ops.credentials("shops", "acme")
    assert state.needs_reconnecting_at is None


def test_a_passing_trouble_at_the_token_endpoint_is_retried_and_marks_nothing(ops, server, sources):
    expired_grant(ops, server)
    server.fail_next(2, status=503)
    assert server.valid(sources().credential("shops", "acme"))
    assert server.token_requests == 3

    expired_grant(ops, server, "globex")
    server.fail_next(4, status=429)
    with pytest.raises(TokenEndpointUnavailable, match="failed 4 tries, the last: 429 temporarily_unavailable"):
        sources().credential("shops", "globex")
    [state] = ops.credentials("shops", "globex")
    assert state.needs_reconnecting_at is None and state.refreshed_at is None


def test_a_wrong_app_secret_is_the_apps_error_not_the_owners(ops, server, sources, client):
    expired_grant(ops, server)
    wrong = OAuthClient(client.token_url, client.client_id, "not-the-secret")
    with pytest.raises(TokenEndpointError, match="401 invalid_client"):
        sources(client=wrong).credential("shops", "acme")
    [state] = ops.credentials("shops", "acme")
    assert state.needs_reconnecting_at is None
