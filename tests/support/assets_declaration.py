"""The declaration the real-Airflow asset test runs through the example DAGs: no shop, pages made up in memory.

Queue ``shops``: three accounts (``acme-us`` and ``acme-eu`` share lane ``acme``, two wide), orders in 30-day
slices back 60 days and a product snapshot. Each orders page stores a number of records that depends only on
the owner and window, so the test can tell from the rows alone what each account received. The schema comes
from ``SYNCLANE_TEST_ASSETS_SCHEMA``.
"""

from __future__ import annotations

import os
import zlib
from datetime import timedelta

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane, WindowedType


def fetch_orders(job: Job) -> Page:
    """Two pages per window; each stores between 1 and 40 orders, fixed by owner and window."""
    seed = zlib.crc32(f"{job.owner}/{job.window_start}".encode())
    return Page(None if job.cursor else "next", 1 + seed % 40)


def fetch_products(job: Job) -> Page:
    return Page(None, 3)


def accounts(queue: str) -> list[Owner]:
    return [Owner("acme-us", "acme", lane_width=2), Owner("acme-eu", "acme", lane_width=2), Owner("globex")]


synclane = SyncLane(
    queues=[
        Queue(
            "shops",
            owners=accounts,
            concurrency=2,
            types=[
                WindowedType(
                    "orders",
                    fetch_orders,
                    horizon=timedelta(days=60),
                    slice=timedelta(days=30),
                    every=timedelta(hours=6),
                ),
                SnapshotType("products", fetch_products, every=timedelta(hours=6)),
            ],
        )
    ],
    schema=os.environ.get("SYNCLANE_TEST_ASSETS_SCHEMA", "synclane_assets"),
    poll_interval=timedelta(seconds=2),
)
