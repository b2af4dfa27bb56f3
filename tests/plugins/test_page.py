"""The SyncLane page in a real Chromium, inside a real Airflow: an operator logs in, opens SyncLane from the
navigation, reads the queues, the lanes and the owners' progress, and requeues the abandoned slice with its
button; the row is pending again at its cursor.

A screenshot of each view is saved under ``test-artifacts/page/`` (or ``$SYNCLANE_TEST_ARTIFACTS/page``).
The browser is the system's Chromium driven by Playwright (``scripts/test`` installs both when it can);
without one the test is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from tests.support.browser import shot, synclane_as_admin
from tests.support.operate_scene import BROKEN, job

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]


def test_an_operator_finds_the_abandoned_slice_and_requeues_it_from_the_page(
    api_server, scene, browser_page, database_url, operate_schema
):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)  # a busy machine: Airflow's UI and the page's refresh take their time
    page = browser_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))

    frame = synclane_as_admin(page, api_server)

    # Queues: the jobs by status, the abandoned one in red.
    card = frame.locator(".card[data-queue=shops]")
    expect(card.locator(".stat.bad")).to_contain_text("1abandoned")
    expect(frame.locator("#updated")).to_have_text(re.compile(r"^updated \d\d:\d\d:\d\d UTC$"))  # as every time
    expect(card).to_contain_text("3running")
    shot(page, "1-queues")

    # Lanes: globex runs its slice at cursor 75 on worker-host-1; acme (two shops, two wide) runs two at once.
    frame.get_by_role("button", name="Lanes", exact=True).click()
    globex = frame.locator("#lanes-table tr[data-lane=globex]")
    expect(globex).to_contain_text("worker-host-1:slot-0")
    expect(globex.locator("code").first).to_have_text("75")
    expect(globex).to_contain_text(re.compile(r"overdue \d"))  # its waiting jobs came due while the slice ran
    acme = frame.locator("#lanes-table tr[data-lane=acme]")
    expect(acme).to_have_count(2)
    expect(acme.nth(0)).to_contain_text("slot 1 of 2")
    expect(acme.nth(1)).to_contain_text("slot 2 of 2")
    expect(acme.nth(1)).to_contain_text("worker-host-2:slot-1")
    shot(page, "2-lanes")

    # Owners: acme-us's first load done (a full bar), globex's abandoned slice with the shop's error.
    frame.get_by_role("button", name="Owners", exact=True).click()
    acme_us = frame.locator("#owners-table tr[data-owner=acme-us]")
    total = sum(
        1 for row in _rows(database_url, operate_schema) if row["owner"] == "acme-us" and row["mode"] == "initial"
    )
    expect(acme_us).to_contain_text(f"{total}/{total} ✓")
    globex_owner = frame.locator("#owners-table tr[data-owner=globex]")
    expect(globex_owner).to_contain_text(BROKEN)
    expect(globex_owner).to_have_class("bad")
    expect(acme_us).to_contain_text(re.compile(r"UTC \((orders|products)\)"))  # the stalest type, named
    shot(page, "3-owners")

    # Jobs: the abandoned ones; the slice's row, its whole record, and its Requeue button.
    frame.get_by_role("button", name="Jobs", exact=True).click()
    frame.locator("#job-filters select[name=status]").select_option("abandoned")
    frame.get_by_role("button", name="Show", exact=True).click()
    row = frame.locator(f"#jobs-table tr[data-job='{scene['abandoned']}']")
    expect(row).to_contain_text("abandoned")
    expect(row).to_contain_text("never (requeue to run)")  # not the instant it was abandoned, as if due then
    expect(row.locator("td.landed")).to_have_text("40 inserted, 8 updated, 2 stale")  # what its pages landed
    row.get_by_role("button", name=f"#{scene['abandoned']}").click()
    expect(frame.locator("#job-detail")).to_contain_text(BROKEN)
    shot(page, "4-jobs")

    row.get_by_role("button", name="Requeue", exact=True).click()
    confirm = frame.get_by_role("dialog")
    expect(confirm).to_contain_text(f"Requeue job #{scene['abandoned']} (globex/orders)? It restarts from its cursor.")
    assert job(database_url, operate_schema, scene["abandoned"])["status"] == "abandoned"  # nothing before a yes
    shot(page, "5-confirm")
    confirm.get_by_role("button", name="Yes, do it").click()
    expect(frame.locator("#message")).to_have_text(
        f"Requeued job #{scene['abandoned']} of queue shops: pending, from its cursor."
    )
    assert dialogs == []  # the page asks in its own box: Airflow's frame allows no window.confirm
    requeued = job(database_url, operate_schema, scene["abandoned"])
    assert (requeued["status"], requeued["cursor"], requeued["attempt_count"]) == ("pending", "50", 0)
    expect(frame.locator("#job-detail")).to_contain_text("pending")  # the page refreshes by itself
    shot(page, "6-requeued")


def test_an_operator_pauses_an_owner_finds_it_in_trouble_and_resumes_it_from_the_owners_view(
    api_server, scene, browser_page, database_url, operate_schema
):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    page = browser_page
    frame = synclane_as_admin(page, api_server)
    frame.get_by_role("button", name="Owners", exact=True).click()

    initech = frame.locator("#owners-table tr[data-owner=initech]")
    expect(initech.locator("td.condition")).to_have_text("healthy")
    initech.get_by_role("button", name="Pause", exact=True).click()
    confirm = frame.get_by_role("dialog")
    expect(confirm).to_contain_text("Pause initech? None of its jobs is taken")
    assert _owner_rows(database_url, operate_schema) == []  # nothing before a yes
    confirm.locator("#confirm-input").fill("token revoked (401)")
    shot(page, "owners-1-pause-confirm")
    confirm.get_by_role("button", name="Yes, do it").click()
    expect(frame.locator("#message")).to_contain_text(
        "Paused owner initech of queue shops (token revoked (401), by admin)"
    )
    expect(initech).to_have_class(re.compile(r"\bpaused\b"))
    expect(initech).to_have_attribute("data-condition", "paused")  # one answer: paused, not "healthy"
    expect(initech.locator("td.condition")).to_contain_text("paused")
    expect(initech.locator("td.condition")).to_contain_text("by admin")
    expect(initech.locator("td.condition")).to_contain_text("token revoked (401)")
    [row] = _owner_rows(database_url, operate_schema)
    assert (row["owner"], row["paused_by"], row["paused_reason"]) == ("initech", "admin", "token revoked (401)")

    # Its work is held, not overdue: in the Lanes view, the Jobs view and the Queues view's counts.
    frame.get_by_role("button", name="Lanes", exact=True).click()
    lane = frame.locator("#lanes-table tr[data-lane=initech]")
    expect(lane).to_contain_text("held: owner paused")
    expect(lane).not_to_contain_text("overdue")
    shot(page, "owners-1b-paused-lanes-held")
    frame.get_by_role("button", name="Jobs", exact=True).click()
    frame.locator("#job-filters input[name=owner]").fill("initech")
    frame.locator("#job-filters").get_by_role("button", name="Show", exact=True).click()
    expect(frame.locator("#jobs-table tr[data-status=pending]").first).to_contain_text("held: owner paused")
    shot(page, "owners-1c-paused-jobs-held")
    frame.get_by_role("button", name="Queues", exact=True).click()
    expect(frame.locator(".card[data-queue=shops]")).to_contain_text("1owners paused")
    frame.get_by_role("button", name="Owners", exact=True).click()

    frame.locator("#owner-filters input[name=troubled]").check()
    frame.locator("#owner-filters").get_by_role("button", name="Show", exact=True).click()
    expect(frame.locator("#owners-table tr[data-owner]")).to_have_count(2)  # globex (its abandoned slice), initech
    expect(frame.locator("#owners-table tr[data-owner=acme-us]")).to_have_count(0)
    shot(page, "owners-2-paused-in-trouble")

    initech.get_by_role("button", name="Resume", exact=True).click()
    expect(confirm).to_contain_text("Resume initech? Its jobs go on from their cursors")
    confirm.get_by_role("button", name="Yes, do it").click()
    expect(frame.locator("#message")).to_contain_text("Resumed owner initech of queue shops")
    expect(initech).to_have_count(0)  # out of trouble: its job waiting to retry is routine
    assert _owner_rows(database_url, operate_schema)[0]["paused_at"] is None
    frame.locator("#owner-filters input[name=troubled]").uncheck()
    frame.locator("#owner-filters").get_by_role("button", name="Show", exact=True).click()
    expect(initech.locator("td.condition")).to_have_text("healthy")
    shot(page, "owners-3-resumed")


def _owner_rows(database_url: str, schema: str) -> list[dict]:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(sql.SQL("SELECT * FROM {}.owners ORDER BY owner").format(sql.Identifier(schema))).fetchall()


def test_the_plugin_is_in_the_navigation_and_on_dag_pages(api_server):
    status, body = api_server.call("GET", "/api/v2/plugins", token=api_server.token("viewer"))
    assert status == 200
    plugin = next(p for p in json.loads(body)["plugins"] if p["name"] == "synclane")
    views = {(view["destination"], view["href"]) for view in plugin["external_views"]}
    assert views == {("nav", "synclane/"), ("dag", "synclane/?dag={DAG_ID}")}
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/synclane"]


def _rows(database_url: str, schema: str) -> list[dict]:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(sql.SQL("SELECT * FROM {}.jobs").format(sql.Identifier(schema))).fetchall()


def test_an_operator_asks_for_a_re_sync_on_the_owners_view_and_follows_it_on_the_re_syncs_view(
    api_server, scene, browser_page, database_url, operate_schema
):
    """The form takes ISO days in UTC and no type until one is chosen; its confirmation lists the windows the
    request makes (last month of globex, cut where globex's history slices are), and a yes makes exactly those."""
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    page = browser_page
    frame = synclane_as_admin(page, api_server)
    frame.get_by_role("button", name="Owners", exact=True).click()

    form = frame.locator("#resync-form")
    expect(form.locator("select[name=type]")).to_have_value("")  # no default type
    expect(form.locator("select[name=type] option:checked")).to_have_text("choose a type")
    expect(form.locator("input[name=start]")).to_have_attribute("placeholder", "YYYY-MM-DD")
    expect(form.locator("input[name=start]")).not_to_have_attribute("type", "date")  # no mm/dd/yyyy picker
    today = datetime.now(timezone.utc).date()
    this_month = today.replace(day=1)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    form.locator("input[name=owner]").fill("globex")
    form.locator("input[name=start]").fill(f"{last_month:%m/%d/%Y}")
    form.locator("input[name=end]").fill(this_month.isoformat())
    form.locator("input[name=reason]").fill("last month's totals were wrong")
    confirm = frame.get_by_role("dialog")
    message = frame.locator("#message")
    asked: list[tuple[dict, dict]] = []  # each call of the resync endpoint: what it was sent, what it answered
    page.on(
        "response",
        lambda r: asked.append((r.request.post_data_json, r.json())) if r.url.endswith("/resync") else None,
    )

    form.get_by_role("button", name="Re-sync…").click()
    expect(message).to_have_text("Re-sync not asked: choose a type.")
    shot(page, "resync-0-form-no-type")
    form.locator("select[name=type]").select_option("orders")
    form.get_by_role("button", name="Re-sync…").click()
    expect(message).to_have_text(
        f'Re-sync not asked: From "{last_month:%m/%d/%Y}" is not a day written YYYY-MM-DD (UTC), e.g. 2026-03-01.'
    )
    expect(message).to_have_class("error")
    shot(page, "resync-0-form-not-a-day")
    expect(confirm).to_be_hidden()
    form.locator("input[name=start]").fill(last_month.isoformat())
    form.get_by_role("button", name="Re-sync…").click()
    expect(confirm).to_contain_text(
        f"Re-sync orders of globex from {last_month} to {this_month} (UTC, the end excluded)? It makes"
    )
    expect(message).to_be_hidden()
    listed = confirm.locator("#confirm-details li")
    expect(listed.first).to_be_visible()
    windows = listed.all_inner_texts()
    shot(page, "resync-1-confirm")
    assert _resync_jobs(database_url, operate_schema) == [] and _requests(database_url, operate_schema) == []
    expect(confirm).to_contain_text(f"It makes {len(windows)} job" + ("s" if len(windows) > 1 else ""))
    expect(confirm).to_contain_text(f"globex: {len(windows)} window")
    history = [
        (row["window_start"], row["window_end"])
        for row in _rows(database_url, operate_schema)
        if row["owner"] == "globex" and row["type"] == "orders" and row["mode"] == "initial"
    ]
    confirm.get_by_role("button", name="Yes, do it").click()
    expect(message).to_contain_text(f"{len(windows)} job")
    [request] = _requests(database_url, operate_schema)
    assert (request["requested_by"], request["reason"], request["owners"]) == (
        "admin",
        "last month's totals were wrong",
        ["globex"],
    )
    made = sorted(
        ((row["window_start"], row["window_end"]) for row in _resync_jobs(database_url, operate_schema)), reverse=True
    )
    assert [_window_text(a, b) for a, b in made] == windows  # the confirmation listed exactly what was made
    assert made[0][1].date() == this_month and made[-1][0].date() == last_month
    for a, b in made:  # each window within one of globex's history slices, where it meets them
        met = [(s, e) for s, e in history if s < b and a < e]
        assert len(met) <= 1 and all(s <= a and b <= e for s, e in met)
    for _ in range(100):  # the page's answers reach this side as events, dispatched while playwright is called
        if len(asked) >= 2:
            break
        page.wait_for_timeout(100)
    [(preview, previewed), (yes, _)] = asked
    assert (preview["dry_run"], yes.get("dry_run", False), yes["key"]) == (True, False, previewed["key"])
    assert request["key"] == previewed["key"]  # the yes asked for the very request the confirmation showed
    made = len(made)
    assert made == request["jobs"] > 0

    _complete_one(database_url, operate_schema, request["key"])
    frame.get_by_role("button", name="Re-syncs", exact=True).click()
    row = frame.locator(f"#resyncs-table tr[data-key='{request['key']}']")
    expect(row.locator("td.progress")).to_contain_text(f"1/{made}")
    expect(row).to_contain_text("last month's totals were wrong")
    expect(row).to_contain_text("by admin")
    shot(page, "resync-2-view")

    status, body = api_server.call("GET", "/synclane/api/queues/shops/resyncs", token=api_server.token("viewer"))
    assert status == 200 and json.loads(body)[0]["done"] == 1  # the page's JSON

    row.get_by_role("button", name="Cancel", exact=True).click()
    expect(confirm).to_contain_text(f"Cancel re-sync {request['key']}?")
    confirm.get_by_role("button", name="Yes, do it").click()
    expect(frame.locator("#message")).to_contain_text(f"Cancelled re-sync {request['key']}")
    expect(row.locator("td.progress")).to_contain_text("cancelled")
    shot(page, "resync-3-cancelled")


def _window_text(start: datetime, end: datetime) -> str:
    """A window as the page writes it."""
    return f"{start.astimezone(timezone.utc):%Y-%m-%d %H:%M} → {end.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC"


def _requests(database_url: str, schema: str) -> list[dict]:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(sql.SQL("SELECT * FROM {}.resync_requests").format(sql.Identifier(schema))).fetchall()


def _resync_jobs(database_url: str, schema: str) -> list[dict]:
    return [row for row in _rows(database_url, schema) if row["request_key"] is not None]


def _complete_one(database_url: str, schema: str, key: str) -> None:
    """The newest window of the request completes, as a worker would leave it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {0}.jobs SET status = 'completed', completed_at = now(), processed_count = 12"
                " WHERE id = (SELECT id FROM {0}.jobs WHERE request_key = %s ORDER BY window_end DESC LIMIT 1)"
            ).format(sql.Identifier(schema)),
            [key],
        )


def test_the_jobs_view_gives_what_each_jobs_pages_landed(api_server, scene):
    status, body = api_server.call(
        "GET", "/synclane/api/queues/shops/jobs?status=abandoned", token=api_server.token("viewer")
    )
    assert status == 200
    [abandoned] = json.loads(body)["items"]
    landed = {name: abandoned[f"{name}_count"] for name in ("inserted", "updated", "unchanged", "stale", "deleted")}
    assert (abandoned["id"], landed) == (
        scene["abandoned"],
        {"inserted": 40, "updated": 8, "unchanged": 0, "stale": 2, "deleted": 0},
    )


def test_an_operator_requeues_a_refused_snapshot_with_force_from_its_row(
    api_server, scene, browser_page, database_url, operate_schema
):
    """The refusal says only a person can decide; the job's row offers the decision, and only there."""
    import psycopg
    from playwright.sync_api import expect
    from psycopg import sql

    expect.set_options(timeout=30_000)
    refusal = "DeletionsRefused: shop.products: … would delete 6 of the owner's 10 row(s) … force_deletions …"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.jobs SET error = %s WHERE id = %s").format(sql.Identifier(operate_schema)),
            [refusal, scene["abandoned"]],
        )
    frame = synclane_as_admin(browser_page, api_server)
    frame.get_by_role("button", name="Jobs", exact=True).click()
    frame.locator("#job-filters select[name=status]").select_option("abandoned")
    frame.get_by_role("button", name="Show", exact=True).click()
    row = frame.locator(f"#jobs-table tr[data-job='{scene['abandoned']}']")
    expect(row.get_by_role("button", name="Requeue with force_deletions")).to_have_count(0)  # on the whole record only
    row.get_by_role("button", name=f"#{scene['abandoned']}").click()
    detail = frame.locator("#job-detail")
    detail.get_by_role("button", name="Requeue with force_deletions").click()
    confirm = frame.get_by_role("dialog")
    expect(confirm).to_contain_text("deletes the rows it does not see, however many")
    assert job(database_url, operate_schema, scene["abandoned"])["force_deletions"] is False  # nothing before a yes
    confirm.get_by_role("button", name="Yes, do it").click()
    expect(frame.locator("#message")).to_have_text(
        f"Requeued job #{scene['abandoned']} of queue shops: pending, from its cursor."
    )
    requeued = job(database_url, operate_schema, scene["abandoned"])
    assert (requeued["status"], requeued["cursor"], requeued["force_deletions"]) == ("pending", "50", True)
    expect(detail.get_by_role("button", name="Requeue with force_deletions")).to_have_count(0)


def test_an_owner_whose_credentials_need_reconnecting_reads_so_in_the_owners_view(
    api_server, scene, browser_page, database_url, operate_schema
):
    import psycopg
    from playwright.sync_api import expect
    from psycopg import sql

    reason = "needs reconnecting: owner 'initech' of queue 'shops': the token endpoint answered invalid_grant"
    with psycopg.connect(database_url, autocommit=True) as conn:  # as a worker leaves it (tests/test_job_credentials)
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.owners (queue, owner, paused_at, paused_reason, paused_by) "
                "VALUES ('shops', 'initech', now(), %s, 'credentials')"
            ).format(sql.Identifier(operate_schema)),
            [reason],
        )
    expect.set_options(timeout=30_000)
    frame = synclane_as_admin(browser_page, api_server)
    frame.get_by_role("button", name="Owners", exact=True).click()
    initech = frame.locator("#owners-table tr[data-owner=initech]")
    expect(initech).to_have_attribute("data-condition", "paused")
    expect(initech.locator("td.condition")).to_contain_text("needs reconnecting since")
    expect(initech.locator("td.condition")).to_contain_text(reason)
    shot(browser_page, "owners-needs-reconnecting")


def test_the_lanes_view_shows_a_learnt_rate_and_a_quota_waited_out(
    api_server, scene, browser_page, database_url, operate_schema
):
    """acme's answers said 3 left for 1 s (a learnt 4 a second); globex used up its daily quota: its waiting jobs
    read held until the reset, not overdue."""
    import psycopg
    from playwright.sync_api import expect
    from psycopg import sql

    budgets = sql.SQL("{}.lane_budgets").format(sql.Identifier(operate_schema))
    with psycopg.connect(database_url, autocommit=True) as conn:  # as lane_gate.observe leaves them
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (queue, lane, learnt_interval, learnt_from, learnt_at) "
                "VALUES ('shops', 'acme', '0.25 s', 'headers', now())"
            ).format(budgets)
        )
        until = conn.execute(
            sql.SQL(
                "INSERT INTO {} (queue, lane, quota_until) VALUES ('shops', 'globex', "
                "date_trunc('day', now()) + interval '1 day') RETURNING quota_until"
            ).format(budgets)
        ).fetchone()[0]
    try:
        expect.set_options(timeout=30_000)
        frame = synclane_as_admin(browser_page, api_server)
        frame.get_by_role("button", name="Lanes", exact=True).click()
        expect(frame.locator("#lanes-table tr[data-lane=acme]").first).to_contain_text("learnt 4.0/s from its headers")
        globex = frame.locator("#lanes-table tr[data-lane=globex]").first
        expect(globex).to_contain_text(f"held: quota until {until:%Y-%m-%d %H:%M:%S}")
        expect(globex).not_to_contain_text("overdue")
        shot(browser_page, "lanes-learnt-rate-and-quota")
        frame.get_by_role("button", name="Jobs", exact=True).click()
        frame.locator("#job-filters input[name=owner]").fill("globex")
        frame.locator("#job-filters").get_by_role("button", name="Show", exact=True).click()
        expect(frame.locator("#jobs-table tr[data-status=pending]").first).to_contain_text("held: lane on quota until")
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DELETE FROM {}").format(budgets))
