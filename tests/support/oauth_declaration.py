"""A declaration whose handler sends its owner's OAuth access token, for the worker operator's test of
``Queue(oauth_conn_id=...)``: queue ``tokens``, owner ``acme``, its token refreshed with the ``shop_oauth``
connection. Each page's credential is kept in ``SENT``."""

from __future__ import annotations

import os
from datetime import timedelta

from synclane_provider.core import Page, Queue, SnapshotType, SyncLane
from synclane_provider.core.page_context import PageJob

SENT: list[str] = []


def products(job: PageJob) -> Page:
    SENT.append(job.credentials())
    return Page("50" if job.cursor is None else None, 50)


synclane = SyncLane(
    queues=[
        Queue(
            "tokens",
            owners=lambda queue: ["acme"],
            types=[SnapshotType("products", products, every=timedelta(days=1))],
            oauth_conn_id="shop_oauth",
        )
    ],
    schema=os.environ["SYNCLANE_TEST_SCHEMA"],
    poll_interval=timedelta(seconds=1),
)
