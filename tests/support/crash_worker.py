"""A worker process for crash tests: it runs pages until the cursor named on the command line,
announces that page on stdout and then hangs inside it, waiting to be killed.

    python -m tests.support.crash_worker DATABASE_URL SCHEMA HANG_AT_CURSOR
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

from synclane_provider.core import Job, Page, WorkerSlot
from tests.support.helpers import declare, paged, products

TOTAL_RECORDS = 300
LEASE = timedelta(seconds=2)
RETRY_DELAY = timedelta(milliseconds=100)


def crash_declaration(schema: str, hang_at: str | None = None):
    pages = paged(TOTAL_RECORDS, 50)

    def handler(job: Job) -> Page:
        if job.cursor == hang_at:
            print(f"in-page {job.id} {job.leased_by}", flush=True)
            time.sleep(600)
        return pages(job)

    return declare(schema, products(handler), lease=LEASE, retry_delay=RETRY_DELAY)


def main() -> None:
    url, schema, hang_at = sys.argv[1:4]
    declaration = crash_declaration(schema, hang_at)
    WorkerSlot(declaration, declaration.database(url), "shops").run_one()


if __name__ == "__main__":
    main()
