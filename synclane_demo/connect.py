"""Connect the demo's accounts at the shop and set their tokens as the owners' credentials:
``python -m synclane_demo.connect`` (docker-compose runs it before Airflow starts; ``scripts/demo`` calls
:func:`set_initial_credentials` itself).

In a real app each account's owner clicks "Connect your shop" once and the provider hands the app an OAuth
grant; here the demo's launcher asks the pretend shop for a grant per connected account at start-up (the shop
keeps its grants in memory, so each start connects again) and sets its access and refresh tokens with
:meth:`~synclane_provider.core.ops.operations.Operations.set_credentials`, encrypted in the jobs database.
From then on the engine refreshes them (``job.credentials()``) with the app's OAuth client, the Airflow
connection :data:`OAUTH_CONN_ID` the launcher adds.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

from synclane_demo.processes import wait_for_http
from synclane_demo.settings import DemoSettings
from synclane_demo.shop.oauth import CLIENT_ID, CLIENT_SECRET
from synclane_demo.store import Store
from synclane_provider.core import Operations
from synclane_provider.core.credentials import CredentialKind, Credentials, CredentialState, Sealer

OAUTH_CONN_ID = "synclane_demo_shop_oauth"
"""The Airflow connection with the app's OAuth client at the shop: host = token URL, login = client id,
password = client secret."""


def oauth_connection(shop_url: str) -> str:
    """The connection :data:`OAUTH_CONN_ID` as JSON, for ``AIRFLOW_CONN_SYNCLANE_DEMO_SHOP_OAUTH``."""
    connection = {
        "conn_type": "http",
        "host": f"{shop_url.rstrip('/')}/oauth/token",
        "login": CLIENT_ID,
        "password": CLIENT_SECRET,
    }
    return json.dumps(connection)


def grant(shop_url: str, account: str, *, now: datetime | None = None) -> Credentials:
    """A new grant of ``account`` at the shop (``/control/connect``), as credentials to set for its owner."""
    request = urllib.request.Request(
        f"{shop_url.rstrip('/')}/control/connect",
        data=json.dumps({"account": account}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the demo's own shop
        tokens = json.loads(response.read())
    now = now or datetime.now(timezone.utc)
    return Credentials(
        CredentialKind.OAUTH,
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=now + timedelta(seconds=float(tokens["expires_in"])),
    )


def connect_accounts(operations: Operations, queue: str, shop_url: str, accounts: list[str]) -> list[CredentialState]:
    """Connect each of ``accounts`` at the shop and set its tokens as its owner's credentials; their states."""
    return [operations.set_credentials(queue, account, grant(shop_url, account)) for account in accounts]


def set_initial_credentials(env: Mapping[str, str]) -> list[CredentialState]:
    """Connect every connected account of the demo (``env``'s settings) at the shop and set its tokens as its
    owner's credentials, encrypted with ``AIRFLOW__SYNCLANE__CREDENTIALS_KEY``; their states."""
    from synclane_demo.sync import build  # the declaration imports this module for OAUTH_CONN_ID

    settings = DemoSettings.from_env(env)
    synclane = build(settings)
    accounts = [account for account, _ in Store(settings.database_url, settings.data_schema).connected_accounts()]
    sealer = Sealer(env.get("AIRFLOW__SYNCLANE__CREDENTIALS_KEY"), named="AIRFLOW__SYNCLANE__CREDENTIALS_KEY")
    with Operations(synclane, synclane.database(settings.database_url), sealer=sealer) as operations:
        return connect_accounts(operations, settings.queue, settings.shop_url, accounts)


def main() -> None:
    settings = DemoSettings.from_env()
    if not settings.database_url:
        raise SystemExit("set SYNCLANE_DEMO_DATABASE_URL to the database the demo may use")
    wait_for_http(f"{settings.shop_url.rstrip('/')}/health", timeout=120)
    states = set_initial_credentials(os.environ)
    print(f"{len(states)} account(s) connected at {settings.shop_url}: their OAuth tokens are set")


if __name__ == "__main__":
    main()
