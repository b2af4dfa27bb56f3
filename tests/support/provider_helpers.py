"""Running triggers from synchronous tests, with every wait bounded."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg

from synclane_provider.core import Operations
from synclane_provider.hooks.synclane import SyncLaneHook


def first_event(trigger, timeout: float = 30.0) -> dict[str, Any]:
    """Run ``trigger`` until its first event (at most ``timeout`` seconds) and return the payload."""

    async def first():
        return await asyncio.wait_for(anext(trigger.run()), timeout)

    return asyncio.run(first()).payload


def in_background(trigger, timeout: float = 30.0) -> Future:
    """Run ``trigger`` on a thread of its own; ``.result()`` is its first event's payload."""
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(first_event, trigger, timeout)
    pool.shutdown(wait=False)
    return future


def together(triggers: list, timeout: float = 30.0) -> list[Future]:
    """Run ``triggers`` on one event loop of one thread, as Airflow's triggerer runs them; each future's
    ``.result()`` is that trigger's first event's payload. A trigger leaves (its connection closed) as soon as it
    has fired, as it does in the triggerer, not when the last one has."""
    futures: list[Future] = [Future() for _ in triggers]

    async def one(trigger, future: Future) -> None:
        events = trigger.run()
        try:
            future.set_result((await asyncio.wait_for(anext(events), timeout)).payload)
        except BaseException as error:  # noqa: BLE001 - handed to the test through its future
            future.set_exception(error)
        finally:
            await events.aclose()

    async def all_of_them() -> None:
        await asyncio.gather(*(one(trigger, future) for trigger, future in zip(triggers, futures)))

    threading.Thread(target=asyncio.run, args=(all_of_them(),), name="triggerer", daemon=True).start()
    return futures


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until_waiting(
    admin: psycopg.Connection, application_name: str, trigger: Future, timeout: float = 20.0
) -> None:
    """Wait until the trigger's connection has run its look at the table (after LISTEN) and sits idle: it is waiting.

    From then on a notification is queued for it by the server, so whatever
    the test does next is seen by the trigger's wait, not by its first look.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trigger.done():
            raise AssertionError(f"the trigger ended before it waited: {trigger.result()}")
        row = admin.execute(
            "SELECT count(*) AS n FROM pg_stat_activity"
            " WHERE application_name = %s AND state = 'idle' AND query <> '' AND query NOT LIKE 'LISTEN%%'",
            [application_name],
        ).fetchone()
        if row["n"]:
            return
        time.sleep(0.02)
    seen = admin.execute("SELECT application_name, state, left(query, 80) AS query FROM pg_stat_activity").fetchall()
    raise AssertionError(f"no idle connection named {application_name!r} after {timeout}s; connections: {seen}")


def operations(declaration, conn_id: str = SyncLaneHook.default_conn_name) -> Operations:
    return Operations(declaration, SyncLaneHook(synclane_conn_id=conn_id).get_database(declaration))
