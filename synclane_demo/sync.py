"""The demo's SyncLane declaration: one queue, ``shops``, with ``products`` and ``orders`` for every connected account,
each account's OAuth tokens refreshed with the app's client at the shop (the connection ``synclane_demo_shop_oauth``).

Airflow's operators load it by import path, ``synclane_demo.sync:synclane``.
Importing it opens no connection (DAG files are parsed often); settings come
from the environment (see :mod:`synclane_demo.settings`), so the end-to-end
test runs the same declaration at a compressed scale.
"""

from __future__ import annotations

import functools

from synclane_demo.client import ShopClient
from synclane_demo.connect import OAUTH_CONN_ID
from synclane_demo.handlers import OrdersHandler, ProductsHandler
from synclane_demo.owners import ConnectedAccounts
from synclane_demo.settings import DemoSettings
from synclane_demo.store import Store
from synclane_provider.core import Queue, RetryPolicy, SnapshotType, SyncLane, WindowedType


def build(settings: DemoSettings) -> SyncLane:
    """The declaration for ``settings``: products first (small, and what a user sees first), then orders."""
    store = Store(settings.database_url, settings.data_schema)
    shop = functools.partial(ShopClient, settings.shop_url, timeout=settings.shop_timeout.total_seconds())
    return SyncLane(
        queues=[
            Queue(
                settings.queue,
                owners=ConnectedAccounts(store, settings.lane_rates()),  # acme: 2 requests a second, as the shop allows
                types=[
                    SnapshotType("products", ProductsHandler(shop, store), every=settings.products_every),
                    WindowedType(
                        "orders",
                        OrdersHandler(shop, store),
                        horizon=settings.horizon,
                        slice=settings.slice,
                        every=settings.orders_every,
                        overlap=settings.overlap,
                    ),
                ],
                oauth_conn_id=OAUTH_CONN_ID,  # the app's OAuth client at the shop: the launcher adds it
                credentials_skew=settings.credentials_skew,
                concurrency=settings.concurrency,
                lease=settings.lease,
                max_lag=settings.max_lag,
                retry=RetryPolicy(
                    **({"max_attempts": settings.max_attempts} if settings.max_attempts is not None else {}),
                    retry_delay=settings.retry_delay,
                    retry_max_delay=settings.retry_max_delay,
                    throttle_delay=settings.throttle_delay,
                    throttle_max_delay=settings.throttle_max_delay,
                ),
            )
        ],
        schema=settings.schema,
        poll_interval=settings.poll_interval,
    )


settings = DemoSettings.from_env()
synclane = build(settings)
