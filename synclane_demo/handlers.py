"""The two handlers, written the way we tell users to write theirs: one page in, one page stored, one Page out.

A handler is given the job (owner, window, cursor), asks the shop for the
page that starts at the cursor with the owner's OAuth access token as its bearer token (``job.credentials()``:
the engine refreshes it before it expires, once across every process, and pauses the owner as *needs
reconnecting* when the shop refuses the grant itself), lands it in its table in one line (a
:class:`~synclane_provider.core.Destination`: a page that runs twice, or a
re-sync of what is stored, writes nothing) and says where the next page starts. Every answer's headers go to
``job.observe`` first, a 429's too: the shop announces its rate limits in them (``X-RateLimit-*``, which it
changes while it runs), and the engine steers the lane's budget by what they say. What the shop said goes back
to SyncLane as one of these:

* 429 → :class:`JobThrottled` with the wait from ``Retry-After``: the job, and every job of its lane (acme-us
  and acme-eu share acme's), waits exactly that long.
* an unknown account → :class:`JobAbandoned`: a retry cannot help, a person should look.
* a token refused (401/403) although the engine handed it as good → :class:`OwnerPaused`: a person should
  look; the owner is paused (no more requests for it) until someone resumes it. (A revoked grant does not
  come here: it ends at the token's refresh, in ``job.credentials()``.)
* anything else (a 503, an unreadable page, a timeout) → the exception itself: an ordinary
  failure, retried with backoff from the same cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from synclane_demo.client import AccessRevoked, AccountNotFound, ShopClient, ShopPage, ShopThrottled
from synclane_demo.store import Store
from synclane_provider.core import Job, JobAbandoned, JobThrottled, OwnerPaused, Page


@contextmanager
def shop_answers(job: Job) -> Iterator[None]:
    """Translate the shop's refusals that mean more than "failed" into SyncLane's exceptions (a 429's headers
    observed first: its announced limit is news too)."""
    try:
        yield
    except ShopThrottled as exc:
        job.observe(exc.headers)
        raise JobThrottled(str(exc), retry_after=exc.retry_after) from exc
    except AccountNotFound as exc:
        raise JobAbandoned(str(exc)) from exc
    except AccessRevoked as exc:
        raise OwnerPaused(str(exc)) from exc


class ShopHandler:
    """One page of a job from the shop, with the owner's current access token, landed in the demo's tables."""

    def __init__(self, shop: Callable[[], ShopClient], store: Store) -> None:
        self._shop = shop
        self._store = store

    def __call__(self, job: Job) -> Page:
        token = job.credentials()
        with shop_answers(job):
            page = self.fetch(self._shop(), job, token)
        job.observe(page.headers)
        self.land(job, page)
        return Page(page.next_cursor, len(page.items))

    def fetch(self, shop: ShopClient, job: Job, token: str) -> ShopPage:
        raise NotImplementedError

    def land(self, job: Job, page: ShopPage) -> None:
        raise NotImplementedError


class OrdersHandler(ShopHandler):
    """``orders``: one page of the orders placed in the job's window."""

    def fetch(self, shop: ShopClient, job: Job, token: str) -> ShopPage:
        return shop.orders(job.owner, job.window_start, job.window_end, job.cursor, token=token)

    def land(self, job: Job, page: ShopPage) -> None:
        self._store.land_orders(job, page.items)


class ProductsHandler(ShopHandler):
    """``products``: one page of the account's whole catalogue (a snapshot, so no window)."""

    def fetch(self, shop: ShopClient, job: Job, token: str) -> ShopPage:
        return shop.products(job.owner, job.cursor, token=token)

    def land(self, job: Job, page: ShopPage) -> None:
        self._store.land_products(job, page.items, complete=page.next_cursor is None)
