"""The owners table: one row per queue and owner with its health and pause, read and written through the store."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.records import OwnerState
from synclane_provider.core.states import OwnerHealth
from tests.support.helpers import declare, execute, products


@pytest.fixture
def store(database_url, schema):
    session = Session(declare(schema, products()).database(database_url))
    yield Store(session)
    session.close()


def test_an_owner_without_a_row_is_healthy_and_not_paused(store):
    state = store.owner("shops", "acme")
    assert state == OwnerState("shops", "acme")
    assert state.health is OwnerHealth.HEALTHY and not state.paused and state.consecutive_failures == 0


def test_an_upsert_makes_the_row_then_writes_every_column_again(store, admin, schema, clock):
    paused = OwnerState(
        "shops",
        "acme",
        health=OwnerHealth.FAILING,
        consecutive_failures=7,
        last_error="HTTPError: 401",
        failing_since=clock.now - timedelta(hours=1),
        paused_at=clock.now,
        paused_reason="token revoked",
        paused_by="handler",
        last_clean_at=clock.now - timedelta(days=1),
        alerted_at=clock.now,
        alerted_for="paused",
    )
    written = store.upsert_owner(paused, now=clock.now)
    assert written == OwnerState(**{**paused.__dict__, "updated_at": clock.now})
    assert store.owner("shops", "acme") == written
    assert store.owner("other", "acme") == OwnerState("other", "acme")  # one row per queue and owner

    later = clock.advance(timedelta(minutes=5))
    resumed = store.upsert_owner(OwnerState("shops", "acme", last_clean_at=later), now=later)
    assert resumed == OwnerState("shops", "acme", last_clean_at=later, updated_at=later)
    count = admin.execute(f'SELECT count(*) AS n FROM "{schema}".owners').fetchone()["n"]
    assert count == 1


def test_an_unknown_health_is_refused_by_the_named_rule(store, admin, schema):
    store.upsert_owner(OwnerState("shops", "acme"))
    with pytest.raises(psycopg.errors.CheckViolation, match="owners_health_is_known"):
        execute(admin, schema, "UPDATE {owners} SET health = 'disabled' WHERE owner = 'acme'")


def test_the_documented_operator_update_resumes_an_owner(store, admin, schema, clock):
    store.upsert_owner(OwnerState("shops", "acme", paused_at=clock.now, paused_reason="gone", paused_by="handler"))
    execute(
        admin,
        schema,
        "UPDATE {owners} SET paused_at = NULL, paused_reason = NULL, paused_by = NULL, updated_at = now() "
        "WHERE queue = 'shops' AND owner = 'acme'",
    )
    assert not store.owner("shops", "acme").paused
