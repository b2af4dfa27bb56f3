"""Nothing of the SyncLane page is served to an anonymous caller, and only a user who may edit DAGs acts.

Against a real ``airflow api-server`` with the plugin loaded (see ``tests/support/api_server.py``): the
plugin's app is public unless its routes depend on Airflow's authentication, so each route is called
without a token, with a forged one, as a viewer and as an admin.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.support.operate_scene import job

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]

READS = [
    "/synclane/",
    "/synclane/static/synclane.js",
    "/synclane/static/synclane.css",
    "/synclane/api/queues",
    "/synclane/api/queues/shops/lanes",
    "/synclane/api/queues/shops/owners",
    "/synclane/api/queues/shops/owners/globex/progress",
    "/synclane/api/queues/shops/jobs?status=abandoned",
    "/synclane/api/jobs/1",
    "/synclane/api/queues/shops/resyncs",
    "/synclane/docs",
    "/synclane/redoc",
    "/synclane/openapi.json",
]
ACTIONS = [
    ("/synclane/api/queues/shops/requeue", {"owner": "globex"}),
    ("/synclane/api/queues/shops/cancel", {"owner": "globex", "reason": "test"}),
    ("/synclane/api/queues/shops/plan", {"owner": "globex"}),
    ("/synclane/api/queues/shops/pause", {"owner": "globex", "reason": "test"}),
    ("/synclane/api/queues/shops/resume", {"owner": "globex"}),
    ("/synclane/api/queues/shops/credentials", {"owner": "globex", "kind": "api_key", "api_key": "sk_auth_8181"}),
    (
        "/synclane/api/queues/shops/resync",
        {"type": "orders", "start": "2026-03-01T00:00:00Z", "end": "2026-03-03T00:00:00Z", "reason": "test"},
    ),
    ("/synclane/api/queues/shops/resyncs/march/cancel", {}),
    ("/synclane/api/queues/shops/resyncs/march/requeue", {}),
]


@pytest.mark.parametrize("path", READS)
def test_a_read_without_a_token_is_refused_with_401_and_no_data(api_server, scene, path):
    status, body = api_server.call("GET", path)
    assert status == 401
    assert b"globex" not in body and b"shops" not in body and b"queues" not in body


@pytest.mark.parametrize("path, body", ACTIONS)
def test_an_action_without_a_token_is_refused_and_changes_nothing(
    api_server, scene, database_url, operate_schema, path, body
):
    status, _ = api_server.call("POST", path, body=body)
    assert status == 401
    assert job(database_url, operate_schema, scene["abandoned"])["status"] == "abandoned"
    assert owner_rows(database_url, operate_schema) == []
    assert resync_requests(database_url, operate_schema) == 0


def test_a_forged_token_is_refused(api_server, scene):
    status, _ = api_server.call("GET", "/synclane/api/queues", token="not-a-token")
    assert status in (401, 403)


@pytest.mark.parametrize("path", READS)
def test_a_viewer_may_read_every_view(api_server, scene, path):
    status, _ = api_server.call("GET", path, token=api_server.token("viewer"))
    assert status == 200


@pytest.mark.parametrize("path, body", ACTIONS)
def test_a_viewer_may_not_act_and_the_table_is_unchanged(api_server, scene, database_url, operate_schema, path, body):
    before = job(database_url, operate_schema, scene["abandoned"])
    status, answer = api_server.call("POST", path, token=api_server.token("viewer"), body=body)
    assert (status, json.loads(answer)["detail"]) == (403, "Forbidden")
    assert job(database_url, operate_schema, scene["abandoned"]) == before
    assert owner_rows(database_url, operate_schema) == []
    assert resync_requests(database_url, operate_schema) == 0


def test_an_admin_requeues_a_job_and_is_told_what_changed(api_server, scene, database_url, operate_schema):
    status, answer = api_server.call(
        "POST",
        "/synclane/api/queues/shops/requeue",
        token=api_server.token("admin"),
        body={"job_id": scene["abandoned"]},
    )
    assert status == 200, answer
    assert json.loads(answer) == {
        "requeued": 1,
        "message": f"Requeued job #{scene['abandoned']} of queue shops: pending, from its cursor.",
    }
    row = job(database_url, operate_schema, scene["abandoned"])
    assert (row["status"], row["cursor"]) == ("pending", "50")


def test_an_admin_pauses_and_resumes_an_owner_and_the_pause_names_who(api_server, scene, database_url, operate_schema):
    token = api_server.token("admin")
    asked = {"owner": "globex", "reason": "token revoked"}
    status, answer = api_server.call("POST", "/synclane/api/queues/shops/pause", token=token, body=asked)
    assert status == 200, answer
    assert json.loads(answer)["message"] == (
        "Paused owner globex of queue shops (token revoked, by admin): none of its jobs is taken until it is resumed."
    )
    [row] = owner_rows(database_url, operate_schema)
    assert (row["owner"], row["paused_reason"], row["paused_by"]) == ("globex", "token revoked", "admin")
    status, body = api_server.call("GET", "/synclane/api/queues/shops/owners?owner=globex", token=token)
    [globex] = json.loads(body)["items"]
    assert (globex["health"], globex["paused_reason"], globex["paused_by"]) == ("healthy", "token revoked", "admin")
    status, answer = api_server.call("POST", "/synclane/api/queues/shops/resume", token=token, body={"owner": "globex"})
    assert status == 200, answer
    assert owner_rows(database_url, operate_schema)[0]["paused_at"] is None
    status, answer = api_server.call(
        "POST", "/synclane/api/queues/shops/pause", token=token, body={**asked, "owner": "x"}
    )
    assert status == 404 and "x" in json.loads(answer)["detail"]


def owner_rows(database_url: str, schema: str) -> list[dict]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(sql.SQL("SELECT * FROM {}.owners ORDER BY owner").format(sql.Identifier(schema))).fetchall()


def resync_requests(database_url: str, schema: str) -> int:
    with psycopg.connect(database_url) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.resync_requests").format(sql.Identifier(schema))
        return conn.execute(query).fetchone()[0]


def test_the_views_answer_as_documented(api_server, scene):
    token = api_server.token("viewer")
    status, body = api_server.call("GET", "/synclane/api/queues/shops/lanes", token=token)
    lanes = {lane["lane"]: lane for lane in json.loads(body)["items"]}
    [globex] = lanes["globex"]["running"]
    assert (globex["cursor"], globex["worker"]) == ("75", "worker-host-1:slot-0")
    assert [(job["id"], job["slot"], job["width"]) for job in lanes["acme"]["running"]] == [
        (scene["acme_eu"][0], 0, 2),
        (scene["acme_eu"][1], 1, 2),
    ]
    assert lanes["initech"]["running"] == []
    status, body = api_server.call("GET", "/synclane/api/queues/shops/owners?troubled=true", token=token)
    # globex's abandoned slice is trouble; initech's job waiting to retry is routine
    owners = {o["owner"]: o for o in json.loads(body)["items"]}
    assert list(owners) == ["globex"] and owners["globex"]["condition"] == "degraded"
    status, body = api_server.call("GET", "/synclane/api/queues/nowhere/lanes", token=token)
    assert status == 404 and "nowhere" in json.loads(body)["detail"]


def test_the_api_docs_describe_the_endpoints_under_the_mounted_prefix(api_server, scene):
    token = api_server.token("viewer")
    status, body = api_server.call("GET", "/synclane/openapi.json", token=token)
    assert status == 200 and "/api/queues/{queue}/requeue" in json.loads(body)["paths"]
    for page in ("/synclane/docs", "/synclane/redoc"):
        status, body = api_server.call("GET", page, token=token)
        assert status == 200 and b"/synclane/openapi.json" in body


def test_an_admin_requeues_a_refused_snapshot_with_force(api_server, scene, database_url, operate_schema):
    status, answer = api_server.call(
        "POST",
        "/synclane/api/queues/shops/requeue",
        token=api_server.token("admin"),
        body={"job_id": scene["abandoned"], "force_deletions": True},
    )
    assert status == 200, answer
    assert json.loads(answer)["requeued"] == 1
    row = job(database_url, operate_schema, scene["abandoned"])
    assert (row["status"], row["force_deletions"]) == ("pending", True)
