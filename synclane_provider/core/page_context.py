"""What a handler may do during one page, besides reading its job: the page's context, handed over with the job.

A :class:`~synclane_provider.core.records.Job` is a row of the jobs table and nothing more. A worker calls a
handler with a :class:`PageJob`: the same row (every attribute of the job, ``dataclasses.replace`` and all) and
the :class:`PageContext` of the page it runs, which takes the lane's rate units the page spends, holds the
transaction its rows land in when their table is in the jobs database, and counts what they did to the table.
A worker's attempt provides the context (``core/run/attempt.py``); landing (``core/land/``) uses nothing else of
the worker. Outside a worker a job has no page: :data:`NO_PAGE` spends nothing, has no transaction, counts
nothing, has no credentials and steers no lane.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from synclane_provider.core.errors import SyncLaneError
from synclane_provider.core.rate_headers import RateNews, read_rate_headers
from synclane_provider.core.records import Job, LandCounts

if TYPE_CHECKING:
    import psycopg


class NoPageCredentialsError(SyncLaneError):
    """``job.credentials()`` of a job that is not in a worker's page: no worker, no owner's credentials."""


class PageContext(Protocol):
    """What one page of a job may do while its handler runs."""

    def spend(self, units: int) -> timedelta:
        """Take ``units`` more of the lane's rate budget, waiting until it allows them; how long it waited."""
        ...

    def transaction(self) -> psycopg.Connection[Any] | None:
        """The connection of the page's transaction in the jobs database, which commits with the job's cursor
        (opened by this call); None when the page has none (outside a worker)."""
        ...

    def count_landed(self, counts: LandCounts) -> None:
        """Add what one landing did to the page's counts, written to the job's row with its cursor."""
        ...

    def credentials(self) -> str:
        """The job's owner's current credential: its API key, or an OAuth access token good for at least the
        queue's ``credentials_skew`` (refreshed first when it is not, once across every process)."""
        ...

    def observe(self, news: RateNews) -> None:
        """Steer the lane's budget by what an API's answer said of its rate limit."""
        ...

    def sent(self, at: float) -> None:
        """The page's request left at ``at`` (time.monotonic()): the lane's next turn is spaced from then."""
        ...


class _NoPage:
    """The context of a job outside a worker's page: no budget to take, no transaction, nowhere to count."""

    def spend(self, units: int) -> timedelta:
        return timedelta(0)

    def transaction(self) -> psycopg.Connection[Any] | None:
        return None

    def count_landed(self, counts: LandCounts) -> None:
        return None

    def credentials(self) -> str:
        raise NoPageCredentialsError(
            "a job outside a worker's page has no credentials: job.credentials() works in a handler that a worker "
            "calls (to try a handler by hand, pass it the credential some other way)"
        )

    def observe(self, news: RateNews) -> None:
        return None

    def sent(self, at: float) -> None:
        return None

    def __repr__(self) -> str:
        return "NO_PAGE"


NO_PAGE: PageContext = _NoPage()
"""The context of a job that is not in a worker's page (a plain :class:`Job`)."""


@dataclass(frozen=True)
class PageJob(Job):
    """A job as its handler gets it for one page: the row, and the page's :class:`PageContext`.

    Equality and ``repr`` are the row's (the context is not compared or shown); ``dataclasses.replace`` keeps
    the context.
    """

    context: PageContext = field(default=NO_PAGE, compare=False, repr=False)

    @classmethod
    def of(cls, job: Job, context: PageContext = NO_PAGE) -> PageJob:
        """``job`` (its row's values) in the page whose context is ``context``; with none, outside a worker's page
        (:data:`NO_PAGE`: to call a handler by hand)."""
        return cls(**{f.name: getattr(job, f.name) for f in _ROW}, context=context)

    def spend(self, units: int = 1) -> timedelta:
        """Take ``units`` more of the lane's rate budget before making that many more requests in this page.

        The worker takes one unit before each page; a handler that makes several requests a page calls this
        before each further one (``job.spend()``) or once for all (``job.spend(3)``). It waits until the lane's
        budget allows them and returns how long it waited (zero when the lane has no rate).
        """
        return self.context.spend(units)

    def credentials(self) -> str:
        """The owner's current credential, to send with this page's requests: its API key, or an OAuth access
        token good for at least the queue's ``credentials_skew`` (refreshed first when it is not: by one caller
        at a time across every worker, so a rotating refresh token is never sent twice).

        Call it for each page rather than keeping the value: a token kept from an earlier page may have expired.
        Raises :class:`~synclane_provider.core.credentials.CredentialsNeedReconnecting` when the owner has none
        that works (none set, or its grant refused): let it out of the handler, and the owner is paused as
        needing reconnecting until its credentials are set again. Raises
        :class:`~synclane_provider.core.credentials.TokenEndpointUnavailable` when the token endpoint does not
        answer: the attempt is retried, and the owner's health is not marked.
        """
        return self.context.credentials()

    def observe(self, answer: object) -> RateNews | None:
        """Tell the lane what an API's answer said of its rate limit: hand over the response (requests, httpx,
        urllib) or its headers, after every request, the refused ones too. Returns what was read (None: the
        answer said nothing of its limit).

        The common header families are read (``X-RateLimit-*``, ``RateLimit`` and ``RateLimit-Policy``,
        ``Retry-After``; see :mod:`~synclane_provider.core.rate_headers`): what is left until the reset, spread
        evenly, becomes the lane's pace for every worker on every machine (never faster than a declared rate);
        nothing left holds the lane until the reset, and a reset further away than the queue's ``longest_wait``
        is waited out with the lane's jobs handed back at their cursors. Outside a worker's page it only reads.
        """
        elapsed = getattr(answer, "elapsed", None)  # requests' and httpx's: from sending to the answer's headers
        if isinstance(elapsed, timedelta):
            self.context.sent(time.monotonic() - elapsed.total_seconds())
        news = read_rate_headers(answer)
        if news is not None:
            self.context.observe(news)
        return news

    def sent(self) -> None:
        """Say that the page's request leaves now, right before sending it, when the handler does work of its own
        first (a query, a token's refresh): the lane's next turn is spaced from this instant rather than from
        when the handler was called. ``job.observe(response)`` says as much for a response that knows how long
        it took (requests', httpx's ``elapsed``)."""
        self.context.sent(time.monotonic())


_ROW = fields(Job)


def page_context(job: Job) -> PageContext:
    """The context of the page ``job`` is in: a worker's, or :data:`NO_PAGE` for a plain row."""
    return job.context if isinstance(job, PageJob) else NO_PAGE
