"""The worker process's one event loop, where the pages of ``async def`` handlers run.

An asyncio handler wants one loop for all its pages: a shared ``httpx.AsyncClient`` (or any asyncio client) keeps
its connections to the API on the loop that made it, and hundreds of lanes' pages then wait on the network together
on one thread, none of them holding a thread of its own. So every slot of a process hands its async pages to the
same loop, on a daemon thread started with the first of them (and again in a forked child, which inherits no
threads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any

_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
"""The process's loop, with the pid that started it."""


def page_loop() -> asyncio.AbstractEventLoop:
    """This process's loop for async pages, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="synclane-pages", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def start_page(page: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
    """Run an async handler's page on the process's loop; cancelling the future cancels the page."""
    return asyncio.run_coroutine_threadsafe(page, page_loop())
