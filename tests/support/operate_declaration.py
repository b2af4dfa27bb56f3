"""The declaration the operator's tests (the page, the CLI) look at, imported by path like a user's own.

Queue ``shops`` in the schema named by ``$SYNCLANE_OPERATE_SCHEMA``: four shops, ``acme-us`` and ``acme-eu``
sharing the lane ``acme`` (two jobs wide), orders in 30-day slices over 60 days and a product snapshot. Nothing runs the
handlers: the tests write the rows' states themselves.
"""

from __future__ import annotations

import os
from datetime import timedelta

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane, WindowedType


def one_page(job: Job) -> Page:
    return Page(next_cursor=None, count=10)


def shops(queue: str) -> list[Owner]:
    if os.environ.get("SYNCLANE_OPERATE_ACCOUNTS_DOWN"):  # as a source that reads its accounts from elsewhere
        raise RuntimeError("no database for the accounts: set ACCOUNTS_URL")
    return [
        Owner("acme-us", lane="acme", lane_width=2),
        Owner("acme-eu", lane="acme", lane_width=2),
        Owner("globex"),
        Owner("initech"),
    ]


synclane = SyncLane(
    queues=[
        Queue(
            "shops",
            owners=shops,
            types=[
                WindowedType(
                    "orders",
                    one_page,
                    horizon=timedelta(days=60),
                    slice=timedelta(days=30),
                    every=timedelta(minutes=15),
                    overlap=timedelta(minutes=5),
                ),
                SnapshotType("products", one_page, every=timedelta(days=1)),
            ],
        )
    ],
    schema=os.environ.get("SYNCLANE_OPERATE_SCHEMA", "synclane_operate"),
)
