"""The demo's accounts connected at the shop at start-up: each owner's credentials are the shop's tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from synclane_demo.connect import OAUTH_CONN_ID, connect_accounts, oauth_connection
from synclane_demo.local import airflow_environment
from synclane_demo.shop.oauth import CLIENT_ID, CLIENT_SECRET
from synclane_demo.store import Store
from synclane_demo.sync import build
from synclane_provider.core import Operations
from synclane_provider.core.credentials import Sealer
from tests.demo.test_shop import get
from tests.support.api_server import airflow_env

KEY = Fernet.generate_key().decode()


def test_each_connected_account_gets_the_shops_tokens_as_its_owners_credentials(start_shop, demo_settings):
    shop = start_shop()
    settings = demo_settings(shop)
    Store(settings.database_url, settings.data_schema).prepare()
    synclane = build(settings)
    with Operations(synclane, synclane.database(settings.database_url), sealer=Sealer(KEY)) as operations:
        states = connect_accounts(operations, "shops", shop.url, ["globex", "umbrella"])
        assert [(s.owner, s.kind) for s in states] == [("globex", "oauth"), ("umbrella", "oauth")]
        for state in states:  # the shop's few minutes, counted from when they were set
            assert 295 < (state.expires_at - state.updated_at).total_seconds() <= 300
            assert state.describe(state.updated_at).startswith("set (oauth), expires in ")
        row = operations.store.sealed_credentials("shops", "globex")
    opened = Sealer(KEY).open(row["sealed"], kind=row["kind"], expires_at=row["expires_at"], whose="globex")
    assert get(f"{shop.url}/accounts/globex/products", token=opened.access_token)[0] == 200  # the shop's own token
    assert opened.refresh_token.startswith("rt_")


def test_the_launcher_gives_airflow_the_apps_oauth_client_and_the_credentials_key(tmp_path):
    env = airflow_environment(
        {},
        home=tmp_path,
        data_url="postgresql://postgres@127.0.0.1/synclane",
        metadata_url="postgresql://postgres@127.0.0.1/synclane_airflow",
        port=9090,
        shop_url="http://127.0.0.1:9091",
        credentials_key=KEY,
    )
    client = json.loads(env[f"AIRFLOW_CONN_{OAUTH_CONN_ID.upper()}"])
    assert (client["host"], client["login"], client["password"]) == (
        "http://127.0.0.1:9091/oauth/token",
        CLIENT_ID,
        CLIENT_SECRET,
    )
    assert env["AIRFLOW__SYNCLANE__CREDENTIALS_KEY"] == KEY
    assert json.loads(oauth_connection("http://shop:8081/"))["host"] == "http://shop:8081/oauth/token"


@pytest.mark.airflow
def test_the_tutorials_reconnect_command_sets_new_tokens_from_the_shop_and_shows_no_value(
    start_shop, demo_settings, tmp_path
):
    shop = start_shop()
    settings = demo_settings(shop)
    Store(settings.database_url, settings.data_schema).prepare()
    synclane = build(settings)
    synclane.database(settings.database_url).connect().close()  # the jobs table, as the demo's first plan makes it
    env = airflow_env(tmp_path / "airflow", database_url=settings.database_url, schema=settings.schema)
    env.update(
        AIRFLOW__SYNCLANE__DECLARATION="synclane_demo.sync:synclane",
        AIRFLOW__SYNCLANE__CREDENTIALS_KEY=KEY,
        SYNCLANE_DEMO_DATABASE_URL=settings.database_url,
        SYNCLANE_DEMO_SCHEMA=settings.schema,
        SYNCLANE_DEMO_DATA_SCHEMA=settings.data_schema,
        SYNCLANE_DEMO_SHOP_URL=shop.url,
    )
    airflow = Path(sys.executable).parent / "airflow"
    command = (  # as docs/tutorials/demo.md gives it
        f'curl -s -X POST {shop.url}/control/connect -d \'{{"account": "umbrella"}}\' '
        f"| {airflow} synclane credentials set umbrella"
    )
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "set (oauth), expires in 5 min" in done.stdout or "set (oauth), expires in 4 min" in done.stdout, done.stdout
    with Operations(synclane, synclane.database(settings.database_url), sealer=Sealer(KEY)) as operations:
        row = operations.store.sealed_credentials("shops", "umbrella")
    opened = Sealer(KEY).open(row["sealed"], kind=row["kind"], expires_at=row["expires_at"], whose="umbrella")
    assert get(f"{shop.url}/accounts/umbrella/products", token=opened.access_token)[0] == 200
    assert (
        opened.access_token not in done.stdout + done.stderr and opened.refresh_token not in done.stdout + done.stderr
    )
