"""The Owners view's credentials: a column with their state, never a value, and a write-only form to set them.

Against a real ``airflow api-server`` with the plugin loaded (``tests/support/api_server.py``, which gives it a
credentials key): the form's endpoint sets them through ``Operations.set_credentials`` for a user who may edit
DAGs and refuses a viewer; neither its answer nor the Owners view's JSON ever carries a value. Then the form
in a real Chromium, its screenshots under ``test-artifacts/page/``.
"""

from __future__ import annotations

import json
import re

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from synclane_provider.core import Operations
from synclane_provider.core.credentials import Sealer
from tests.support.api_server import CREDENTIALS_KEY
from tests.support.browser import shot, synclane_as_admin
from tests.support.operate_scene import declaration

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]

SET = "/synclane/api/queues/shops/credentials"
OAUTH = {
    "owner": "globex",
    "kind": "oauth",
    "access_token": "at_page_clear_7171",
    "refresh_token": "rt_page_clear_7272",
    "expires_in": 3600,
}


def test_an_admin_sets_an_owners_credentials_and_is_answered_with_their_state_only(
    api_server, scene, database_url, operate_schema
):
    status, answer = api_server.call("POST", SET, token=api_server.token("admin"), body=OAUTH)
    assert status == 200, answer
    told = json.loads(answer)
    assert told["owner"] == "globex"
    assert re.fullmatch(r"set \(oauth\), expires in (59 min( \d+ s)?|1 h)", told["credentials"]), told
    assert told["message"] == f"Credentials of owner globex of queue shops set: {told['credentials']}."
    [row] = credential_rows(database_url, operate_schema)
    opened = Sealer(CREDENTIALS_KEY).open(row["sealed"], kind=row["kind"], expires_at=row["expires_at"], whose="globex")
    assert (opened.access_token, opened.refresh_token) == ("at_page_clear_7171", "rt_page_clear_7272")
    assert (row["owner"], row["kind"]) == ("globex", "oauth")
    assert_no_value(answer)


def test_an_api_key_set_from_the_form_is_sealed_and_its_state_says_so(api_server, scene, database_url, operate_schema):
    body = {"owner": "initech", "kind": "api_key", "api_key": "sk_page_clear_7373", "refresh_token": "ignored_7474"}
    status, answer = api_server.call("POST", SET, token=api_server.token("admin"), body=body)
    assert (status, json.loads(answer)["credentials"]) == (200, "set (api_key)")
    [row] = credential_rows(database_url, operate_schema)
    opened = Sealer(CREDENTIALS_KEY).open(row["sealed"], kind=row["kind"], expires_at=None, whose="initech")
    assert (opened.api_key, opened.refresh_token) == ("sk_page_clear_7373", None)  # only the chosen kind's fields
    assert "sk_page_clear_7373" not in answer.decode()


def test_a_viewer_may_not_set_credentials_and_nothing_is_stored(api_server, scene, database_url, operate_schema):
    status, answer = api_server.call("POST", SET, token=api_server.token("viewer"), body=OAUTH)
    assert (status, json.loads(answer)["detail"]) == (403, "Forbidden")
    status, _ = api_server.call("POST", SET, body=OAUTH)
    assert status == 401
    assert credential_rows(database_url, operate_schema) == []


def test_the_owners_view_json_carries_each_owners_credential_state_and_never_a_value(api_server, scene):
    api_server.call("POST", SET, token=api_server.token("admin"), body=OAUTH)
    status, body = api_server.call("GET", "/synclane/api/queues/shops/owners", token=api_server.token("viewer"))
    assert status == 200
    owners = {o["owner"]: o["credentials"] for o in json.loads(body)["items"]}
    assert owners["globex"].startswith("set (oauth), expires in ")
    assert owners["initech"] == "not set"
    assert_no_value(body)
    status, body = api_server.call(
        "GET", "/synclane/api/queues/shops/owners?owner=globex", token=api_server.token("viewer")
    )
    assert [o["credentials"][:12] for o in json.loads(body)["items"]] == ["set (oauth),"]
    assert_no_value(body)


@pytest.mark.parametrize(
    "body, complaint",
    [
        ({**OAUTH, "expires_in": -5}, "expires_in must be a positive number of seconds"),
        ({"owner": "globex", "kind": "oauth", "expires_in": 60}, "need an access_token or a refresh_token"),
        ({"owner": "globex", "kind": "api_key", "access_token": "at_page_clear_7171"}, "need an api_key"),
        ({**OAUTH, "kind": "password"}, "unknown credential kind 'password': one of api_key, oauth"),
        ({**OAUTH, "owner": None}, "owner is required"),
        ({**OAUTH, "owner": "umbrela"}, "umbrela"),
    ],
)
def test_bad_credentials_are_refused_by_name_without_quoting_a_value(
    api_server, scene, database_url, operate_schema, body, complaint
):
    status, answer = api_server.call("POST", SET, token=api_server.token("admin"), body=body)
    assert status in (400, 404) and complaint in json.loads(answer)["detail"], answer
    assert_no_value(answer)
    assert credential_rows(database_url, operate_schema) == []


def test_an_operator_sets_credentials_with_the_owners_views_form_and_sees_only_their_state(
    api_server,
    scene,
    browser_page,
    database_url,
    operate_schema,
):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    page = browser_page
    frame = synclane_as_admin(page, api_server)
    frame.get_by_role("button", name="Owners", exact=True).click()
    globex = frame.locator("#owners-table tr[data-owner=globex]")
    expect(globex.locator("td.credentials span.credentials")).to_have_text("not set")
    shot(page, "credentials-1-not-set")

    globex.get_by_role("button", name="Set…", exact=True).click()
    form = frame.locator("#credentials-form")
    expect(form).to_contain_text("Set the credentials of globex")
    expect(form.locator("input[name=refresh_token]")).to_be_visible()  # OAuth first: access and refresh token
    form.locator("input[name=secret]").fill("at_page_clear_7171")
    form.locator("input[name=refresh_token]").fill("rt_page_clear_7272")
    form.locator("input[name=expires_in]").fill("5")
    expect(form.locator("input[name=secret]")).to_have_attribute("type", "password")  # never shown while typed
    shot(page, "credentials-2-form")
    assert credential_rows(database_url, operate_schema) == []  # nothing before the form is sent

    form.get_by_role("button", name="Set credentials").click()
    expect(form).to_be_hidden()
    for field in ("secret", "refresh_token", "expires_in"):  # cleared once sent, not when next opened
        expect(form.locator(f"input[name={field}]")).to_have_value("")
    expect(frame.locator("#message")).to_contain_text("Credentials of owner globex of queue shops set: set (oauth)")
    expect(globex.locator("td.credentials span.credentials")).to_have_text(
        re.compile(r"^set \(oauth\), expires in [45] min( \d+ s)?$")
    )
    [row] = credential_rows(database_url, operate_schema)
    opened = Sealer(CREDENTIALS_KEY).open(row["sealed"], kind=row["kind"], expires_at=None, whose="globex")
    assert (opened.access_token, opened.refresh_token) == ("at_page_clear_7171", "rt_page_clear_7272")
    shot(page, "credentials-3-set")

    globex.get_by_role("button", name="Set…", exact=True).click()  # the form again: empty, nothing read back
    for field in ("secret", "refresh_token", "expires_in"):
        expect(form.locator(f"input[name={field}]")).to_have_value("")
    form.locator("select[name=kind]").select_option("api_key")
    expect(form.locator("input[name=refresh_token]")).to_be_hidden()
    expect(form).to_contain_text("API key")
    shot(page, "credentials-4-api-key-form")
    form.get_by_role("button", name="Back").click()
    assert_no_value(frame.locator("body").inner_html().encode())

    # The shop refuses globex's grant at a refresh: the column says so in red, and new credentials clear it.
    reason = "the token endpoint answered invalid_grant: refresh token reused: grant revoked"
    with Operations(declaration(operate_schema), declaration(operate_schema).database(database_url)) as operations:
        operations.store.credentials_need_reconnecting("shops", "globex", reason=reason, now=None)
    state = globex.locator("td.credentials span.credentials")
    expect(state).to_have_text(f"needs reconnecting: {reason}")
    expect(state).to_have_class(re.compile(r"\breconnect\b"))
    shot(page, "credentials-5-needs-reconnecting")
    globex.get_by_role("button", name="Set…", exact=True).click()
    form.locator("input[name=secret]").fill("at_page_clear_7171")
    form.locator("input[name=refresh_token]").fill("rt_page_clear_7272")
    form.get_by_role("button", name="Set credentials").click()
    expect(state).to_have_text("set (oauth)")
    shot(page, "credentials-6-reconnected")


VALUES = ("at_page_clear_7171", "rt_page_clear_7272", "sk_page_clear_7373")


def assert_no_value(body: bytes) -> None:
    text = body.decode()
    for value in VALUES:
        assert value not in text


def credential_rows(database_url: str, schema: str) -> list[dict]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        query = sql.SQL("SELECT * FROM {}.credentials ORDER BY owner").format(sql.Identifier(schema))
        return conn.execute(query).fetchall()
