"""An example declaration to try the provider with: one queue over a pretend source (no network, nothing stored).

The example DAGs in ``dags/`` use it until ``SYNCLANE_DECLARATION`` names your
own. A real handler fetches one page for ``job.owner`` in ``job.window_start``
to ``job.window_end`` from ``job.cursor``, upserts the records into its own
tables, and returns where the next page starts.
"""

from __future__ import annotations

from datetime import timedelta

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane, WindowedType

PAGE_SIZE = 50


def _pretend_page(total: int, job: Job) -> Page:
    """Page ``job.cursor`` of ``total`` pretend records; the cursor is the offset of the next page."""
    offset = int(job.cursor or 0)
    count = min(PAGE_SIZE, total - offset)
    following = offset + count
    return Page(next_cursor=str(following) if following < total else None, count=count)


def fetch_orders(job: Job) -> Page:
    """One page of a pretend orders API: 120 orders in every window."""
    return _pretend_page(120, job)


def fetch_products(job: Job) -> Page:
    """One page of a pretend product catalogue of 75 products."""
    return _pretend_page(75, job)


def connected_accounts(queue: str) -> list[Owner]:
    """The accounts to sync; ``north`` and ``south`` share a rate limit, so they share a lane."""
    return [Owner("north", lane="north-south"), Owner("south", lane="north-south"), Owner("east")]


synclane = SyncLane(
    queues=[
        Queue(
            "example",
            owners=connected_accounts,
            types=[
                WindowedType(
                    "orders",
                    fetch_orders,
                    horizon=timedelta(days=90),
                    slice=timedelta(days=30),
                    every=timedelta(minutes=15),
                    overlap=timedelta(minutes=5),
                ),
                SnapshotType("products", fetch_products, every=timedelta(hours=6)),
            ],
            concurrency=2,
        )
    ],
)
