"""Owners' credentials: kept encrypted in the jobs database, set through Operations, shown only as a state."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from psycopg import sql

from synclane_provider.core import Operations
from synclane_provider.core.credentials import CredentialKeyError, Credentials, CredentialState, Sealer
from synclane_provider.core.errors import UnknownOwnerError, UnknownQueueError
from synclane_provider.core.redact import redact
from tests.support.helpers import declare, owners, products

KEY = Fernet.generate_key().decode()
OAUTH = Credentials("oauth", access_token="at_clear_1f2e3d4c", refresh_token="rt_clear_9a8b7c6d", expires_at=None)


@pytest.fixture
def declaration(schema):
    return declare(schema, products(), owner_source=owners("acme", "globex"))


@pytest.fixture
def ops(declaration, database_url, clock):
    with Operations(declaration, declaration.database(database_url), clock=clock, sealer=Sealer(KEY)) as operations:
        yield operations


def stored(admin, schema: str) -> str:
    query = sql.SQL("SELECT string_agg(c::text, E'\\n') AS dump FROM {}.credentials AS c").format(
        sql.Identifier(schema)
    )
    return admin.execute(query).fetchone()["dump"] or ""


def test_credentials_are_stored_encrypted_and_no_clear_value_is_in_the_table(ops, admin, schema, clock):
    expiring = Credentials(
        "oauth", access_token="at_clear_1f2e3d4c", refresh_token="rt_clear_9a8b7c6d", expires_at=clock.now
    )
    ops.set_credentials("shops", "acme", expiring)
    ops.set_credentials("shops", "globex", Credentials("api_key", api_key="sk_live_clear_4455"))
    dump = stored(admin, schema)
    assert dump.count("\n") == 1  # two rows
    for value in ("at_clear_1f2e3d4c", "rt_clear_9a8b7c6d", "sk_live_clear_4455"):
        assert value not in dump
    sealed = ops.store.sealed_credentials("shops", "acme")
    opened = Sealer(KEY).open(sealed["sealed"], kind=sealed["kind"], expires_at=sealed["expires_at"], whose="acme")
    assert (opened.access_token, opened.refresh_token, opened.expires_at) == (
        "at_clear_1f2e3d4c",
        "rt_clear_9a8b7c6d",
        clock.now,
    )


def test_a_value_read_back_is_masked_in_every_error_from_then_on(ops):
    ops.set_credentials("shops", "acme", Credentials("api_key", api_key="plain-looking-value-7788"))
    sealed = ops.store.sealed_credentials("shops", "acme")
    Sealer(KEY).open(sealed["sealed"], kind=sealed["kind"], expires_at=None, whose="acme")
    assert redact("the shop refused plain-looking-value-7788") == "the shop refused ***"


def test_the_state_says_set_expires_refreshed_and_never_shows_a_value(ops, clock):
    ops.set_credentials(
        "shops",
        "acme",
        Credentials(
            "oauth", access_token="at_x_1234", refresh_token="rt_x_1234", expires_at=clock.now + timedelta(minutes=4)
        ),
    )
    ops.set_credentials("shops", "globex", Credentials("api_key", api_key="sk_live_clear_4455"))
    acme, globex = ops.credentials("shops")
    assert (acme.owner, acme.kind, acme.expires_at, acme.refreshed_at) == (
        "acme",
        "oauth",
        clock.now + timedelta(minutes=4),
        None,
    )
    assert acme.describe(clock.now) == "set (oauth), expires in 4 min"
    assert acme.describe(clock.now + timedelta(minutes=5)) == "set (oauth), expired 1 min ago"
    assert globex.describe(clock.now) == "set (api_key)"
    assert set(vars(acme)) == set(CredentialState.__dataclass_fields__)  # no field could hold a value
    assert "at_x_1234" not in repr(ops.credentials("shops")) and "x_1234" not in repr(OAUTH)
    assert CredentialState("shops", "nobody").describe(clock.now) == "not set"


def test_every_listed_owner_has_a_state_and_one_without_credentials_reads_not_set(ops, clock):
    ops.set_credentials("shops", "globex", Credentials("api_key", api_key="sk_live_clear_4455"))
    acme, globex = ops.credentials("shops")
    assert (acme.owner, acme.describe(clock.now), globex.describe(clock.now)) == ("acme", "not set", "set (api_key)")
    assert ops.credentials("shops", "acme") == [acme]
    with pytest.raises(UnknownOwnerError, match="nobody"):
        ops.credentials("shops", "nobody")


def test_setting_again_replaces_the_credentials(ops, clock):
    ops.set_credentials("shops", "acme", Credentials("api_key", api_key="first-key-0001"))
    ops.set_credentials("shops", "acme", Credentials("api_key", api_key="second-key-0002"))
    sealed = ops.store.sealed_credentials("shops", "acme")
    assert (
        Sealer(KEY).open(sealed["sealed"], kind="api_key", expires_at=None, whose="acme").api_key == "second-key-0002"
    )


def test_a_wrong_key_fails_naming_whose_credentials_and_what_to_do(ops, declaration, database_url):
    ops.set_credentials("shops", "acme", OAUTH)
    sealed = ops.store.sealed_credentials("shops", "acme")
    with pytest.raises(
        CredentialKeyError, match="credentials of shops/acme cannot be decrypted .* set with another key"
    ):
        Sealer(Fernet.generate_key().decode()).open(sealed["sealed"], kind="oauth", expires_at=None, whose="shops/acme")


def test_a_rotated_key_still_opens_what_the_old_one_sealed(ops):
    ops.set_credentials("shops", "acme", OAUTH)
    sealed = ops.store.sealed_credentials("shops", "acme")
    rotated = Sealer(f"{Fernet.generate_key().decode()},{KEY}")
    assert (
        rotated.open(sealed["sealed"], kind="oauth", expires_at=None, whose="acme").access_token == "at_clear_1f2e3d4c"
    )


def test_no_key_is_named_when_credentials_are_set_and_nothing_is_stored(declaration, database_url, admin, schema):
    sealer = Sealer(None, named="[synclane] credentials_key")  # a process that never sets credentials needs none
    with Operations(declaration, declaration.database(database_url), sealer=sealer) as ops:
        with pytest.raises(CredentialKeyError, match=r"no key .* set \[synclane\] credentials_key to a Fernet key"):
            ops.set_credentials("shops", "acme", OAUTH)
    assert stored(admin, schema) == ""


def test_a_key_that_is_not_a_fernet_key_is_refused_without_showing_it():
    with pytest.raises(CredentialKeyError, match=r"\[synclane\] credentials_key is not a Fernet key") as refused:
        Sealer("not-a-key-but-secret", named="[synclane] credentials_key")
    assert "not-a-key-but-secret" not in str(refused.value)


def test_an_unknown_owner_or_queue_is_refused_by_name(ops):
    with pytest.raises(UnknownOwnerError, match="'initech'"):
        ops.set_credentials("shops", "initech", OAUTH)
    with pytest.raises(UnknownQueueError, match="'stores'"):
        ops.set_credentials("stores", "acme", OAUTH)


def test_an_owner_the_source_does_not_list_is_refused_naming_the_owners_it_does_list_and_nothing_about_lanes(ops):
    """A guessed name (``acme`` for ``acme-us``) is answered with the names to use; credentials have no lane to name."""
    with pytest.raises(UnknownOwnerError) as refused:
        ops.set_credentials("shops", "acme-us", OAUTH)
    assert str(refused.value) == (
        "owner 'acme-us' is not listed by the owner source of queue 'shops', which lists acme, globex"
    )


@pytest.mark.parametrize(
    ("given", "complaint"),
    [
        (dict(kind="api_key"), "kind api_key need an api_key"),
        (dict(kind="oauth", api_key="k"), "kind oauth need an access_token or a refresh_token"),
        (dict(kind="password", api_key="k"), "unknown credential kind 'password': one of api_key, oauth"),
    ],
)
def test_credentials_without_what_their_kind_needs_are_refused(given, complaint):
    with pytest.raises(ValueError, match=complaint):
        Credentials(**given)
