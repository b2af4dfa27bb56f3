"""A handler asks for its owner's credential with ``job.credentials()``: an API key, or an access token refreshed
once for every process, against a real token server; an owner with none that works is paused as needing
reconnecting, and setting its credentials resumes it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from cryptography.fernet import Fernet

from synclane_provider.core import Job, Operations, Page, WorkerSlot
from synclane_provider.core.credentials import Credentials, Sealer
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.page_context import NoPageCredentialsError, PageJob
from synclane_provider.core.run.results import Outcome
from synclane_provider.core.run.tokens import DEFAULT_SKEW, OAuthClient, TokenSource
from tests.support.helpers import declare, owners, products, rows
from tests.support.oauth_server import OAuthServer

KEY = Fernet.generate_key().decode()


class Calling:
    """A handler of two pages of 50 that sends ``job.credentials()`` with each, as a client would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None, str]] = []

    def __call__(self, job: PageJob) -> Page:
        credential = job.credentials()
        self.sent.append((job.owner, job.cursor, credential))
        return Page("50" if job.cursor is None else None, 50)


@pytest.fixture
def server():
    with OAuthServer(lifetime=600) as running:
        yield running


@pytest.fixture
def client(server) -> OAuthClient:
    return OAuthClient(server.token_url, server.client_id, server.client_secret)


@pytest.fixture
def handler() -> Calling:
    return Calling()


@pytest.fixture
def declaration(schema, handler):
    return declare(schema, products(handler), owner_source=owners("acme", "globex"))


@pytest.fixture
def database(declaration, database_url):
    return declaration.database(database_url)


@pytest.fixture
def ops(declaration, database):
    with Operations(declaration, database, sealer=Sealer(KEY)) as operations:
        yield operations


@pytest.fixture
def tokens(database, client):
    source = TokenSource(database, Sealer(KEY), client, sleep=lambda s: None)
    yield source
    source.close()


@pytest.fixture
def slot(declaration, database, tokens, clock):
    with WorkerSlot(declaration, database, "shops", clock=clock, tokens=tokens) as running:
        yield running


def connect(ops, server, owner: str = "acme", *, expires_in: timedelta = timedelta(minutes=-1)) -> str:
    """The owner connected, its access token expiring ``expires_in`` from now (expired by default); returns the
    refresh token."""
    access, refresh = server.grant()
    ops.set_credentials(
        "shops",
        owner,
        Credentials(
            "oauth", access_token=access, refresh_token=refresh, expires_at=datetime.now(timezone.utc) + expires_in
        ),
    )
    return refresh


def test_a_handler_sends_the_owners_api_key_with_every_page(ops, slot, handler, clock):
    ops.set_credentials("shops", "acme", Credentials("api_key", api_key="sk_live_acme"))
    ops.plan("shops", owner="acme", now=clock.now)
    result = slot.run_one()
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert handler.sent == [("acme", None, "sk_live_acme"), ("acme", "50", "sk_live_acme")]


def test_an_expired_access_token_is_refreshed_once_and_the_new_one_sent_with_every_page(
    ops, server, slot, handler, clock
):
    refresh = connect(ops, server)
    ops.plan("shops", owner="acme", now=clock.now)
    result = slot.run_one()
    assert result is not None and result.outcome is Outcome.COMPLETED
    [first, second] = [credential for _, _, credential in handler.sent]
    assert first == second and server.valid(first)
    assert server.token_requests == 1 and server.invalid_grants == 0
    assert server.revoked(refresh) is False


def test_a_job_outside_a_workers_page_has_no_credentials():
    job = PageJob(**{name: None for name in Job.__dataclass_fields__})
    with pytest.raises(NoPageCredentialsError, match="a job outside a worker's page has no credentials"):
        job.credentials()


def paused_by_credentials(ops, admin, schema, owner: str = "acme"):
    """The owner's state, after checking that its job was handed back at its first cursor, no attempt spent."""
    [job] = rows(admin, schema, "owner = %s", [owner])
    assert job["status"] == "pending" and job["cursor"] is None and job["attempt_count"] == 0
    return ops.owner("shops", owner)


def test_an_owner_whose_grant_was_revoked_is_paused_as_needs_reconnecting_with_its_job_handed_back(
    ops, server, slot, handler, clock, admin, schema
):
    server.revoke(connect(ops, server))
    ops.plan("shops", owner="acme", now=clock.now)
    result = slot.run_one()
    assert result is not None and result.outcome is Outcome.PAUSED
    state = paused_by_credentials(ops, admin, schema)
    assert state.paused and state.paused_by == "credentials"
    assert state.paused_reason.startswith("needs reconnecting: owner 'acme' of queue 'shops': the token endpoint ")
    assert "invalid_grant" in state.paused_reason
    assert state.health.value == "healthy" and state.consecutive_failures == 0
    assert slot.run_one() is None  # nothing of it is taken until it is reconnected
    assert handler.sent == []
    [credentials] = ops.credentials("shops", "acme")
    assert credentials.describe(datetime.now(timezone.utc)).startswith("needs reconnecting: ")


def test_an_owner_without_credentials_is_paused_as_needs_reconnecting(ops, slot, clock, admin, schema):
    ops.plan("shops", owner="acme", now=clock.now)
    result = slot.run_one()
    assert result is not None and result.outcome is Outcome.PAUSED
    state = paused_by_credentials(ops, admin, schema)
    assert (state.paused_by, state.paused_reason) == (
        "credentials",
        "needs reconnecting: owner 'acme' of queue 'shops' has no credentials set",
    )


def test_the_health_check_alerts_once_about_an_owner_that_needs_reconnecting(ops, slot, clock):
    ops.plan("shops", owner="acme", now=clock.now)
    slot.drain()
    [finding] = ops.check_health("shops", abandoned_since=None, now=clock.now).findings
    assert (finding.problem, finding.owner) == ("paused", "acme")
    assert finding.message.startswith(
        "paused: owner acme needs reconnecting: owner 'acme' of queue 'shops' has no credentials set (paused at "
    )
    assert finding.message.endswith(
        "none of its jobs runs until its credentials are set again (airflow synclane credentials set acme)"
    )
    assert ops.check_health("shops", abandoned_since=None, now=clock.advance(timedelta(minutes=5))).healthy


def test_setting_the_credentials_of_an_owner_paused_as_needs_reconnecting_resumes_it_and_its_job_completes(
    ops, server, slot, handler, clock, admin, schema
):
    server.revoke(connect(ops, server))
    ops.plan("shops", owner="acme", now=clock.now)
    slot.drain()
    assert ops.owner("shops", "acme").paused_by == "credentials"

    state = ops.set_credentials("shops", "acme", Credentials("api_key", api_key="sk_live_acme"), now=clock.now)
    assert state.needs_reconnecting_at is None
    assert not ops.owner("shops", "acme").paused
    slot.drain()
    [job] = rows(admin, schema, "owner = 'acme'")
    assert job["status"] == "completed"
    assert handler.sent == [("acme", None, "sk_live_acme"), ("acme", "50", "sk_live_acme")]


def test_setting_the_credentials_of_an_owner_an_operator_paused_leaves_it_paused(ops, slot, clock):
    ops.pause("shops", "acme", "contract ended", by="ana", now=clock.now)
    ops.set_credentials("shops", "acme", Credentials("api_key", api_key="sk_live_acme"), now=clock.now)
    state = ops.owner("shops", "acme")
    assert state.paused and (state.paused_by, state.paused_reason) == ("ana", "contract ended")


def test_an_oauth_owner_on_a_queue_without_an_oauth_client_fails_with_an_error_naming_the_setting(
    ops, server, declaration, database, handler, clock, admin, schema
):
    connect(ops, server)
    ops.plan("shops", owner="acme", now=clock.now)
    with WorkerSlot(declaration, database, "shops", clock=clock, tokens=TokenSource(database, Sealer(KEY), None)) as s:
        result = s.run_one()
        s.tokens.close()
    assert result is not None and result.outcome is Outcome.FAILED
    [job] = rows(admin, schema, "owner = 'acme'")
    assert "queue 'shops' has no OAuth client to refresh tokens with: set oauth_conn_id of the queue" in job["error"]


def test_a_queue_names_its_oauth_connection_and_skew_and_bad_ones_are_refused(schema):
    queue = declare(schema, products(), oauth_conn_id="shop_oauth").queue("shops")
    assert (queue.oauth_conn_id, queue.credentials_skew) == ("shop_oauth", DEFAULT_SKEW)
    with pytest.raises(DeclarationError, match="oauth_conn_id of queue 'shops' must be a non-empty string, got ''"):
        declare(schema, products(), oauth_conn_id="")
    with pytest.raises(DeclarationError, match="credentials_skew of queue 'shops' must be positive"):
        declare(schema, products(), credentials_skew=timedelta(0))
    with pytest.raises(DeclarationError, match="credentials_skew of queue 'shops' must be a timedelta, got 120"):
        declare(schema, products(), credentials_skew=120)
