"""The demo's handlers and owner source against the real engine, the real shop and real PostgreSQL.

Worker slots on threads (the engine's WorkerPool) stand in for Airflow's
mapped tasks here; the end-to-end test runs the same declaration in Airflow.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from cryptography.fernet import Fernet
from psycopg import sql
from psycopg.rows import dict_row

from synclane_demo.connect import connect_accounts
from synclane_demo.shop.oauth import CLIENT_ID, CLIENT_SECRET
from synclane_demo.store import DEMO_ACCOUNTS, Store
from synclane_demo.sync import build
from synclane_provider.core import JobThrottled, Operations, RateNews, WorkerPool, WorkerSlot
from synclane_provider.core.credentials import CredentialKind, Credentials, Sealer
from synclane_provider.core.page_context import NO_PAGE, PageJob
from synclane_provider.core.run.lane_gate import LaneGate
from synclane_provider.core.run.tokens import OAuthClient, TokenSource
from tests.demo.test_shop import access_token
from tests.support.helpers import Background

KEY = Fernet.generate_key().decode()
"""The key the owners' credentials are sealed with, as ``[synclane] credentials_key`` in Airflow."""


def oauth_client(shop) -> OAuthClient:
    """The app's OAuth client at ``shop``: what the connection ``synclane_demo_shop_oauth`` gives a worker."""
    return OAuthClient(f"{shop.url}/oauth/token", CLIENT_ID, CLIENT_SECRET)


def settle(shop, synclane, database, queue="shops", timeout=60.0) -> None:
    """Run the queue until no job will run again without help (waiting out retry delays), within ``timeout``."""
    pool = WorkerPool(synclane, database, queue, slots=3, sealer=Sealer(KEY), oauth=oauth_client(shop))
    try:
        Background(pool.run_until_settled, name="settle").result(timeout)
    finally:
        pool.shutdown()


@pytest.fixture
def demo(start_shop, demo_settings):
    """Start a shop, declare the demo against it, create the demo's tables and plan once."""

    def make(shop_faults=None, **settings):
        shop = start_shop(**(shop_faults or {}))
        config = demo_settings(shop, **settings)
        synclane = build(config)
        Store(config.database_url, config.data_schema).prepare()
        database = synclane.database(config.database_url)
        with Operations(synclane, database, sealer=Sealer(KEY)) as ops:
            ops.plan("shops")
            connect_accounts(ops, "shops", shop.url, [account for account, _ in DEMO_ACCOUNTS])
        return shop, config, synclane, database

    return make


def jobs(database_url, schema, where="true", params=()) -> list[dict]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        query = sql.SQL("SELECT * FROM {}.jobs WHERE " + where + " ORDER BY id").format(sql.Identifier(schema))
        return conn.execute(query, list(params)).fetchall()


def stored(database_url, schema, table, account, since=None, until=None) -> int:
    with psycopg.connect(database_url) as conn:
        query = sql.SQL(
            "SELECT count(*) FROM {}.{} WHERE account = %s"
            + (" AND placed_at >= %s AND placed_at < %s" if since is not None else "")
        ).format(sql.Identifier(schema), sql.Identifier(table))
        return conn.execute(query, [account] + ([since, until] if since is not None else [])).fetchone()[0]


def shop_orders(shop, job) -> int:
    return len(
        shop.shop.catalogue.orders(job["owner"], job["window_start"], job["window_end"], datetime.now(timezone.utc))
    )


def is_broken_slice(shop, job) -> bool:
    broken_at = shop.shop.faults.broken_at
    return (
        job["owner"] == "globex"
        and job["mode"] == "initial"
        and job["type"] == "orders"
        and (job["window_start"] <= broken_at < job["window_end"])
    )


def test_every_account_syncs_and_the_broken_slice_ends_abandoned_at_cursor_50(demo):
    shop, config, synclane, database = demo()
    started = datetime.now(timezone.utc)
    settle(shop, synclane, database)
    rows = jobs(config.database_url, config.schema)

    assert {(r["owner"], r["lane"]) for r in rows} == {
        ("acme-us", "acme"),
        ("acme-eu", "acme"),
        ("globex", "globex"),
        ("initech", "initech"),
        ("umbrella", "umbrella"),
    }
    assert len([r for r in rows if r["type"] == "orders" and r["mode"] == "initial"]) == 5 * 3  # 90 days, 30-day slices
    [broken] = [r for r in rows if r["status"] != "completed"]
    assert is_broken_slice(shop, broken)
    assert (broken["status"], broken["cursor"], broken["processed_count"]) == ("abandoned", "50", 50)
    assert (
        broken["attempt_count"] == synclane.queue("shops").max_attempts + 1
    )  # the regular attempts, then the deferred one
    assert broken["error"].startswith("UnreadablePage: the shop returned a page that could not be read")

    # The health check (what the synclane_health DAG runs) names the owner, the job and its error.
    with Operations(synclane, database) as ops:
        [finding] = ops.check_health("shops", abandoned_since=started).findings
        window = ops.job(broken["id"]).describe()
    assert finding.message == (
        f"abandoned: owner globex, job {window}, at cursor '50' after {broken['attempt_count']} attempt(s): "
        f"{broken['error']}"
    )
    assert window.startswith("globex/orders [") and window.endswith(f"] #{broken['id']}")

    for row in rows:
        if row is broken:
            continue
        if row["type"] == "orders":
            assert row["processed_count"] == shop_orders(shop, row)
            assert row["mode"] != "initial" or row["processed_count"] > 0  # a recent recurring window may be empty
            assert (
                stored(
                    config.database_url,
                    config.data_schema,
                    "orders",
                    row["owner"],
                    row["window_start"],
                    row["window_end"],
                )
                == row["processed_count"]
            )
        else:
            assert row["processed_count"] == len(shop.shop.catalogue.products(row["owner"]))
            assert stored(config.database_url, config.data_schema, "products", row["owner"]) == row["processed_count"]


def test_lanes_take_turns_and_each_account_loads_its_newest_month_first(demo):
    shop, config, synclane, database = demo(shop_faults={"latency": 0.01, "broken_account": None})
    settle(shop, synclane, database)
    rows = jobs(config.database_url, config.schema)
    assert {r["status"] for r in rows} == {"completed"}

    by_lane = defaultdict(list)
    for row in rows:
        by_lane[row["lane"]].append((row["started_at"], row["completed_at"], row["owner"]))
    assert {owner for *_, owner in by_lane["acme"]} == {"acme-us", "acme-eu"}
    for lane, spans in by_lane.items():
        spans.sort()
        for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
            assert end <= start, f"two jobs of lane {lane} ran at once"
    started = {(r["owner"], r["started_at"]) for r in rows}
    assert len({owner for owner, _ in started}) == 5

    first_asked: dict[tuple, int] = {}
    for entry in shop.shop.requests_after(0):
        if entry["resource"] == "orders" and entry["cursor"] == 0:
            first_asked.setdefault((entry["account"], entry["since"]), entry["seq"])
    for owner in ("acme-us", "acme-eu", "globex", "initech", "umbrella"):
        slices = [r for r in rows if r["owner"] == owner and r["type"] == "orders" and r["mode"] == "initial"]
        order = sorted(slices, key=lambda r: first_asked[(owner, r["window_start"].isoformat())])
        assert [r["window_start"] for r in order] == sorted((r["window_start"] for r in slices), reverse=True)


def test_after_the_shop_heals_a_requeue_completes_the_slice_from_cursor_50(demo):
    shop, config, synclane, database = demo()
    settle(shop, synclane, database)
    [broken] = jobs(config.database_url, config.schema, "status = 'abandoned'")
    shop.shop.faults.heal()
    seen = shop.shop.requests_after(0)[-1]["seq"]

    with Operations(synclane, database) as ops:
        assert ops.requeue("shops", owner="globex") == 1
    settle(shop, synclane, database)

    [done] = jobs(config.database_url, config.schema, "id = %s", [broken["id"]])
    assert done["status"] == "completed" and done["processed_count"] == shop_orders(shop, done)
    asked = [
        e["cursor"] for e in shop.shop.requests_after(seen) if e["account"] == "globex" and e["resource"] == "orders"
    ]
    assert asked[0] == 50 and 0 not in asked  # it continued where it stopped, never from the first page
    assert (
        stored(config.database_url, config.data_schema, "orders", "globex", done["window_start"], done["window_end"])
        == done["processed_count"]
    )


def test_failures_and_throttles_continue_from_the_cursor_without_counting_twice(demo):
    shop, config, synclane, database = demo(
        shop_faults={"rate_429": 0.15, "rate_503": 0.15, "retry_after": 0, "seed": 11, "broken_account": None},
        max_attempts=50,
    )
    settle(shop, synclane, database)
    rows = jobs(config.database_url, config.schema)
    assert {r["status"] for r in rows} == {"completed"}
    assert any(r["attempt_count"] > 1 for r in rows)
    for row in rows:
        if row["type"] == "orders":
            assert row["processed_count"] == shop_orders(shop, row)  # a restart from 0 would count pages twice

    log = shop.shop.requests_after(0)
    resumed = 0
    for failed in (e for e in log if e["status"] != 200 and e["cursor"] > 0):
        same = [
            e
            for e in log
            if e["seq"] > failed["seq"]
            and (e["account"], e["resource"], e.get("since"))
            == (failed["account"], failed["resource"], failed.get("since"))
        ]
        assert same[0]["cursor"] == failed["cursor"]  # the next try asked for the page that had failed
        resumed += 1
    assert resumed > 0


def test_a_429_makes_the_job_wait_exactly_the_named_time(demo, database_url):
    shop, config, synclane, database = demo(shop_faults={"rate_429": 1.0, "retry_after": 30})
    tokens = TokenSource(database, Sealer(KEY), oauth_client(shop))
    slot = WorkerSlot(synclane, database, "shops", tokens=tokens)
    try:
        result = slot.run_one()
    finally:
        slot.close()
        tokens.close()
    [row] = jobs(config.database_url, config.schema, "id = %s", [result.job.id])
    assert row["status"] == "failed" and row["error"].startswith("JobThrottled: the shop asked us to slow down")
    with psycopg.connect(database_url) as conn:
        waits = conn.execute("SELECT extract(epoch FROM %s - now())", [row["next_run_at"]]).fetchone()[0]
    assert 25 < waits <= 30


def test_accounts_connect_and_disconnect_with_sql(demo):
    shop, config, synclane, database = demo(shop_faults={"broken_account": None})
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        accounts = sql.SQL("{}.accounts").format(sql.Identifier(config.data_schema))
        conn.execute(sql.SQL("UPDATE {} SET connected = false WHERE id = 'initech'").format(accounts))
        conn.execute(sql.SQL("INSERT INTO {} (id) VALUES ('hooli')").format(accounts))
    owners = synclane.queue("shops").owners("shops")
    assert [(o.id, o.lane_or_id) for o in owners] == [
        ("acme-eu", "acme"),
        ("acme-us", "acme"),
        ("globex", "globex"),
        ("hooli", "hooli"),
        ("umbrella", "umbrella"),
    ]
    Store(config.database_url, config.data_schema).prepare()  # preparing again reconnects nobody
    assert "initech" not in [o.id for o in synclane.queue("shops").owners("shops")]

    with Operations(synclane, database) as ops:
        summary = ops.plan("shops")
    assert summary.owners == 5
    hooli = jobs(config.database_url, config.schema, "owner = 'hooli'")
    # products, three slices, and the recurring window unless the first period of the (UTC) day is still running
    assert sorted((r["type"], r["mode"]) for r in hooli if r["mode"] == "initial") == [("orders", "initial")] * 3 + [
        ("products", "initial")
    ]
    assert len(hooli) - 4 <= 1
    settle(shop, synclane, database)
    with Operations(synclane, database, sealer=Sealer(KEY)) as ops:
        # connected by SQL alone, it has no credentials: paused as needing them, nothing asked at the shop
        state = ops.owner("shops", "hooli")
        assert state.paused_by == "credentials" and "has no credentials set" in state.paused_reason
        assert not [e for e in shop.shop.requests_after(0) if e["account"] == "hooli"]
        ops.set_credentials("shops", "hooli", Credentials(CredentialKind.OAUTH, access_token="at_hooli_own_token"))
    settle(shop, synclane, database)
    hooli = jobs(config.database_url, config.schema, "owner = 'hooli'")
    assert {r["status"] for r in hooli} == {"abandoned"}  # the shop has no such account: a retry cannot help
    assert all(
        r["attempt_count"] == 1 and r["error"].startswith("JobAbandoned: the shop has no such account") for r in hooli
    )


def test_a_page_stored_twice_changes_nothing(demo):
    shop, config, synclane, database = demo(shop_faults={"broken_account": None})
    with Operations(synclane, database) as ops:
        [job] = ops.list_jobs("shops", owner="initech", type="products")
    handler = synclane.queue("shops").job_type("products").handler
    job = PageJob.of(job, ByHand(access_token(shop, "initech")))
    first = handler(job)
    before = row_versions(config.database_url, config.data_schema, "products", "initech")
    again = handler(job)
    assert first == again and first.count == 50
    assert stored(config.database_url, config.data_schema, "products", "initech") == 50
    # landed again, equal to what is stored: not one row written (each row's version, its xmin, is the same)
    assert row_versions(config.database_url, config.data_schema, "products", "initech") == before


class ByHand:
    """A page run by hand, outside a worker: no budget, no transaction, no counts (as a plain row's), and the
    credential the test got from the shop itself."""

    def __init__(self, token: str) -> None:
        self.token = token

    def spend(self, units: int) -> timedelta:
        return NO_PAGE.spend(units)

    def transaction(self):
        return NO_PAGE.transaction()

    def count_landed(self, counts) -> None:
        NO_PAGE.count_landed(counts)

    def credentials(self) -> str:
        return self.token

    def observe(self, news: RateNews) -> None:
        """Nothing to steer: a page by hand has no lane budget (as a plain row's), and what the shop announced is
        still read, and returned, by ``job.observe``."""
        return NO_PAGE.observe(news)

    def sent(self, at: float) -> None:
        NO_PAGE.sent(at)


class Observing(ByHand):
    """A page by hand that keeps what its handler's answers said of the shop's limit, in the order told."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.told: list[RateNews] = []

    def observe(self, news: RateNews) -> None:
        self.told.append(news)


def test_the_handlers_tell_the_lane_what_each_answer_says_of_the_limit_a_429_included(demo):
    shop, config, synclane, database = demo(shop_faults={"broken_account": None, "rate_limits": {"acme": 2}})
    with Operations(synclane, database) as ops:
        [products] = ops.list_jobs("shops", owner="acme-us", type="products")
        orders = ops.list_jobs("shops", owner="acme-us", type="orders")[0]
    page = Observing(access_token(shop, "acme-us"))
    synclane.queue("shops").job_type("products").handler(PageJob.of(products, page))
    synclane.queue("shops").job_type("orders").handler(PageJob.of(orders, page))
    with pytest.raises(JobThrottled):  # the third request in the second: one too many
        synclane.queue("shops").job_type("products").handler(PageJob.of(products, page))
    assert [(news.limit, news.remaining, news.retry_after) for news in page.told] == [
        (2, 1, None),
        (2, 0, None),
        (2, 0, timedelta(seconds=1)),  # the 429's, with its Retry-After
    ]


def row_versions(database_url, schema, table, account) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        query = sql.SQL("SELECT id, xmin::text FROM {}.{} WHERE account = %s").format(
            sql.Identifier(schema), sql.Identifier(table)
        )
        return dict(conn.execute(query, [account]).fetchall())


def rate_limited_demo(demo):
    """The demo against a shop that allows acme 2 requests a second, with 10 % random 429s naming one second."""
    return demo(
        shop_faults={
            "rate_limits": {"acme": 2},
            "rate_429": 0.1,
            "retry_after": 1,
            "latency": 0.02,
            "seed": 3,
            "broken_account": None,
        },
        rates="acme=2",
        max_attempts=50,
        horizon=timedelta(days=60),
    )


def test_the_shop_never_refuses_acme_for_its_rate_and_each_random_429_holds_acmes_lane_once(demo):
    shop, config, synclane, database = rate_limited_demo(demo)
    settle(shop, synclane, database, timeout=120)
    assert {r["status"] for r in jobs(config.database_url, config.schema)} == {"completed"}
    counters = shop.shop.limits.status()["counters"]
    assert counters.get("429_random", 0) > 0
    assert counters.get("429_over_limit", 0) == 0, refusals(shop)
    assert counters.get("429_ignored_wait", 0) == 0, refusals(shop)


def refusals(shop) -> str:
    """The shop's counters, and every refused request with the two before it, to read when a check above fails."""
    answered = shop.shop.requests_after(0)
    shown = sorted({i + d for i, e in enumerate(answered) if e["status"] == 429 for d in (-2, -1, 0) if i + d >= 0})
    lines = [
        f"{e['at']} {e['account']} {e['resource']} {e['status']} {e.get('fault', '')}"
        for e in map(answered.__getitem__, shown)
    ]
    return f"{shop.shop.limits.status()['counters']}\n" + "\n".join(lines)


def test_without_the_budget_and_the_lane_throttle_the_shop_refuses_acme(demo, monkeypatch):
    """The check above can fail: a worker that neither takes budget, nor learns a pace from the limit the shop
    announces, nor holds the lane runs into both walls (and keeps running into them: the run is stopped once the
    shop has counted both)."""
    monkeypatch.setattr(LaneGate, "throttle", lambda self, job, wait: None)
    monkeypatch.setattr(LaneGate, "limits_of", lambda self, job: None)
    monkeypatch.setattr(LaneGate, "observe", lambda self, job, news: None)
    shop, config, synclane, database = rate_limited_demo(demo)
    pool = WorkerPool(synclane, database, "shops", slots=3, sealer=Sealer(KEY), oauth=oauth_client(shop))
    running = Background(pool.run, name="unguarded")
    deadline = time.monotonic() + 60
    counters: dict = {}
    while time.monotonic() < deadline and running.is_alive():
        counters = shop.shop.limits.status()["counters"]
        if counters.get("429_over_limit", 0) and counters.get("429_ignored_wait", 0):
            break
        time.sleep(0.2)
    pool.shutdown()
    running.result(timeout=60)
    assert counters.get("429_over_limit", 0) > 0, counters
    assert counters.get("429_ignored_wait", 0) > 0, counters


REFRESHED_AT_EVERY_PAGE = {"token_lifetime": 60}
"""Tokens of a minute, refreshed two minutes ahead: every page's ``job.credentials()`` refreshes, so a revoked
grant shows at the very next page."""


def test_a_revoked_grant_pauses_its_account_as_needs_reconnecting_and_new_credentials_resume_it(demo):
    shop, config, synclane, database = demo(shop_faults=REFRESHED_AT_EVERY_PAGE)
    shop.shop.oauth.revoke("initech")  # the user disconnected the app at the shop
    settle(shop, synclane, database)
    with Operations(synclane, database, sealer=Sealer(KEY)) as ops:
        state = ops.owner("shops", "initech")
        assert state.paused and state.paused_by == "credentials", state
        assert state.paused_reason.startswith("needs reconnecting: ") and "invalid_grant" in state.paused_reason
        [credentials] = ops.credentials("shops", "initech")
        assert credentials.describe(credentials.updated_at).startswith("needs reconnecting: ")
        findings = ops.check_health("shops", abandoned_since=None).findings  # globex's broken slice besides
        assert [(f.problem, f.owner) for f in findings if f.owner == "initech"] == [("paused", "initech")]
    waiting = jobs(config.database_url, config.schema, "owner = 'initech'")
    assert waiting and {job["status"] for job in waiting} == {"pending"}
    asked = [(e["resource"], e["status"]) for e in shop.shop.requests_after(0) if e["account"] == "initech"]
    assert asked == [("token", 400)]  # its refresh refused, then not one request more
    seen = shop.shop.requests_after(0)[-1]["seq"]

    with Operations(synclane, database, sealer=Sealer(KEY)) as ops:  # reconnected: new tokens resume it
        connect_accounts(ops, "shops", shop.url, ["initech"])
        assert not ops.owner("shops", "initech").paused
    settle(shop, synclane, database)
    done = jobs(config.database_url, config.schema, "owner = 'initech'")
    assert {job["status"] for job in done} == {"completed"}
    asked = [e for e in shop.shop.requests_after(seen) if e["account"] == "initech"]
    assert asked and {e["status"] for e in asked} == {200}


def test_the_shop_revokes_umbrella_mid_job_and_new_credentials_continue_it_from_that_cursor(demo):
    faults = {"revoke_account": "umbrella", "broken_account": None, **REFRESHED_AT_EVERY_PAGE}
    shop, config, synclane, database = demo(shop_faults=faults)
    settle(shop, synclane, database)
    served = [e for e in shop.shop.requests_after(0) if e["account"] == "umbrella"]
    pages = [e for e in served if e["resource"] != "token"]
    assert [e["status"] for e in pages] == [200, 200]  # two pages, then its grant revoked
    assert (served[-1]["resource"], served[-1].get("fault")) == ("token", "invalid_grant")  # not one request more
    [resource] = {e["resource"] for e in pages}  # one job, mid-way: its products, as each account's first
    assert [e["cursor"] for e in pages] == [0, 50]
    with Operations(synclane, database) as ops:
        state = ops.owner("shops", "umbrella")
        assert state.paused and state.paused_by == "credentials" and "invalid_grant" in state.paused_reason
    waiting = jobs(config.database_url, config.schema, "owner = 'umbrella'")
    assert {job["status"] for job in waiting} == {"pending"}
    [interrupted] = [job for job in waiting if job["type"] == resource and job["cursor"] is not None]
    assert (interrupted["cursor"], interrupted["attempt_count"]) == ("100", 0)  # no attempt spent on the pause
    others = jobs(config.database_url, config.schema, "owner <> 'umbrella'")
    assert others and {job["status"] for job in others} == {"completed"}  # the other accounts went on
    seen = served[-1]["seq"]

    with Operations(synclane, database, sealer=Sealer(KEY)) as ops:
        connect_accounts(ops, "shops", shop.url, ["umbrella"])
    settle(shop, synclane, database)
    assert {job["status"] for job in jobs(config.database_url, config.schema, "owner = 'umbrella'")} == {"completed"}
    asked = [e for e in shop.shop.requests_after(seen) if e["account"] == "umbrella" and e["resource"] != "token"]
    assert (asked[0]["resource"], asked[0]["cursor"]) == (resource, 100)  # from its cursor, not its first page
    assert {e["status"] for e in asked} == {200}


def test_acmes_learnt_rate_follows_the_limit_the_shop_announces_when_it_changes(demo):
    """acme's lane declares 2 a second and learns from the shop's headers: 2 a second while the shop allows 2,
    1 a second within moments of the shop cutting acme to 1, and nothing sent over the new limit once learnt."""
    shop, config, synclane, database = demo(
        shop_faults={"rate_limits": {"acme": 2}, "latency": 0.02, "broken_account": None},
        rates="acme=2",
        horizon=timedelta(days=365),
    )
    pool = WorkerPool(synclane, database, "shops", slots=3, sealer=Sealer(KEY), oauth=oauth_client(shop))
    running = Background(pool.run, name="learning")

    def learnt() -> float | None:
        with psycopg.connect(config.database_url) as conn:
            row = conn.execute(
                sql.SQL("SELECT extract(epoch FROM learnt_interval) FROM {}.lane_budgets WHERE lane = 'acme'").format(
                    sql.Identifier(config.schema)
                )
            ).fetchone()
        return None if row is None or row[0] is None else 1 / float(row[0])

    def until_learnt(rate: float, within: float) -> float | None:
        deadline, seen = time.monotonic() + within, None
        while time.monotonic() < deadline and running.is_alive():
            seen = learnt()
            if seen is not None and abs(seen - rate) < 0.01:
                return seen
            time.sleep(0.1)
        return seen

    try:
        assert until_learnt(2.0, within=30) == pytest.approx(2.0)
        shop.shop.limits.change({"acme": 1})
        cut = time.monotonic()
        assert until_learnt(1.0, within=10) == pytest.approx(1.0)
        assert time.monotonic() - cut < 5
        over_before = shop.shop.limits.status()["counters"].get("429_over_limit", 0)
        time.sleep(3)  # acme keeps sending, at its learnt rate
        assert shop.shop.limits.status()["counters"].get("429_over_limit", 0) == over_before
    finally:
        pool.shutdown()
        running.result(60)
