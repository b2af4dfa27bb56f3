"""Secrets never shown: a handler's error that quotes a key, a token or a password is stored with ``***`` in its
place, so the table, the page's JSON and every reader of them (the CLI, alerts, asset events) show no secret."""

from __future__ import annotations

import json

import pytest
from psycopg import sql

from synclane_provider.core import Operations, OwnerPaused, WorkerSlot
from synclane_provider.core.ops.monitor import Monitor, plain
from synclane_provider.core.redact import MASK, redact, remember_secret
from tests.support.helpers import declare, failing, owners, products, rows

FORMS = {
    "a URL's api_key": (
        RuntimeError("401 Unauthorized for https://api.example.com/v1/orders?api_key=sk_live_abc123"),
        "sk_live_abc123",
    ),
    "an Authorization header": (
        RuntimeError("refused with headers {'Authorization': 'Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig_zz9'}"),
        "eyJhbGciOiJIUzI1NiJ9.e30.sig_zz9",
    ),
    "a Basic Authorization header": (
        RuntimeError("sent Authorization: Basic c2hvcDpodW50ZXIy to the shop"),
        "c2hvcDpodW50ZXIy",
    ),
    "a form's token=": (
        RuntimeError("refresh refused: grant_type=refresh_token&refresh_token=rt_9f8e7d6c&client_id=app"),
        "rt_9f8e7d6c",
    ),
    "a password in JSON": (
        ValueError('login refused for {"user": "shop", "password": "hunter2-Correct"}'),
        "hunter2-Correct",
    ),
    "a value the process knows": (
        RuntimeError("the shop says the key k-remembered-7341 is unknown"),
        "k-remembered-7341",
    ),
}


def everything_stored(admin, schema: str) -> str:
    """Every row of every table in the schema, as text: where a secret would be found if it were stored."""
    tables = admin.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'",
        [schema],
    ).fetchall()
    lines = []
    for table in tables:
        query = sql.SQL("SELECT t::text AS line FROM {}.{} AS t").format(
            sql.Identifier(schema), sql.Identifier(table["table_name"])
        )
        lines += [row["line"] for row in admin.execute(query).fetchall()]
    return "\n".join(lines)


def page_json(operations: Operations, clock) -> str:
    """What the page's JSON routes serve: every view of the queue, as the page gets it."""
    monitor = Monitor(operations)
    views = [
        monitor.queues(now=clock.now),
        monitor.lanes("shops", now=clock.now),
        monitor.owners("shops", now=clock.now),
        monitor.jobs("shops"),
    ]
    return json.dumps(plain(views))


@pytest.mark.parametrize("form", FORMS)
def test_a_handlers_error_is_stored_shown_and_logged_with_its_secret_masked(
    form, database_url, schema, admin, clock, caplog
):
    exc, secret = FORMS[form]
    caplog.set_level("INFO")
    remember_secret("k-remembered-7341")  # as a credential read for an owner is
    declaration = declare(schema, products(failing(exc)), owner_source=owners("acme"))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as slot,
    ):
        ops.plan("shops", now=clock.now)
        assert slot.run_one() is not None
        [job] = rows(admin, schema)
        assert MASK in job["error"] and secret not in job["error"]
        assert job["error"].startswith(type(exc).__name__ + ": ")  # the rest of the message is kept to read
        stored = everything_stored(admin, schema)
        assert secret not in stored and MASK in stored
        shown = page_json(ops, clock)
        assert secret not in shown and MASK in shown
    assert secret not in caplog.text and MASK in caplog.text  # the worker's log of the failure


def test_a_handlers_pause_reason_is_stored_and_logged_with_its_secret_masked(
    database_url, schema, admin, clock, caplog
):
    def revoked(job):
        raise OwnerPaused("401 for https://shop.example.com/api?access_token=at_revoked_5512") from RuntimeError(
            "the shop answered 401 to Authorization: Bearer at_revoked_5512"
        )

    declaration = declare(schema, products(revoked), owner_source=owners("acme"))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database, clock=clock) as ops,
        WorkerSlot(declaration, database, "shops", clock=clock) as slot,
    ):
        ops.plan("shops", now=clock.now)
        slot.run_one()
        stored = everything_stored(admin, schema)
        assert "at_revoked_5512" not in stored
        [acme] = Monitor(ops).owners("shops", now=clock.now).items
        assert acme.paused_reason == f"401 for https://shop.example.com/api?access_token={MASK}"
        assert "at_revoked_5512" not in page_json(ops, clock)
    assert "at_revoked_5512" not in caplog.text and f"access_token={MASK}" in caplog.text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("GET /orders?apikey=abc&page=2", "GET /orders?apikey=***&page=2"),
        ("x-api-key: k_9876 sent", "x-api-key: *** sent"),
        ("accessToken=q1w2e3; clientSecret='zz top'", "accessToken=***; clientSecret='***'"),
        ("aws_secret_access_key=AKIA1234", "aws_secret_access_key=***"),
        ("https://bob:hunter22@db.example.com/x", "https://bob:***@db.example.com/x"),
        ("failed with Bearer abcdefghij", "failed with Bearer ***"),
        ("KEY=val, PASSWORD = pw", "KEY=***, PASSWORD = ***"),
        (
            "the shop refused the account's token: 401 (/accounts/u)",
            "the shop refused the account's token: 401 (/accounts/u)",
        ),
    ],
)
def test_every_form_of_a_sensitive_name_is_masked(text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text", ["a monkey=banana", "the primary key of 3", "page 50 of globex orders answers 500", "token bucket empty"]
)
def test_ordinary_words_are_left_alone(text):
    assert redact(text) == text
