"""Fresh first under a tight budget: while a lane's recurring work is due, its history (initial slices, re-syncs)
keeps to ``Queue.history_share`` of the lane's budget (half by default), and a history job holding the slot
the recurring job needs hands the lane over after its page, continuing later from its cursor. Without recurring
work due, history has the whole budget.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from synclane_provider.core import Operations, Owner, Page, Rate, WorkerPool
from synclane_provider.core.db.store import LaneTake
from tests.support.helpers import declare, execute, orders, owners, rows

RATE = Rate(20, headroom=0)
"""A page every 50 ms in the lane."""


class Pages:
    """A handler whose history jobs have ``history`` pages and recurring jobs ``recurring``, noting each page sent
    as (job id, mode, cursor, time)."""

    def __init__(self, *, history: int, recurring: int) -> None:
        self.counts = {"initial": history, "manual": history, "recurring": recurring}
        self.sent: list[tuple[int, str, int, float]] = []
        self._lock = threading.Lock()

    def __call__(self, job) -> Page:
        done = int(job.cursor or 0)
        with self._lock:
            self.sent.append((job.id, str(job.mode), done, time.monotonic()))
        done += 1
        return Page(str(done) if done < self.counts[str(job.mode)] else None, 1)

    def modes(self) -> list[str]:
        return [mode for _, mode, _, _ in sorted(self.sent, key=lambda s: s[3])]


def add(admin, schema: str, mode: str, *, key: str, due_in: float = 0.0, width: int = 1, running: bool = False) -> None:
    now = datetime.now(timezone.utc)
    end = now if mode == "recurring" else now - timedelta(days=10)
    execute(
        admin,
        schema,
        "INSERT INTO {jobs} (queue, owner, lane, lane_width, type, mode, priority, window_start, window_end,"
        " dedup_key, next_run_at, status, leased_by, lease_expires_at)"
        " VALUES ('shops', 'acme', 'acme', %s, 'orders', %s, 0, %s, %s, %s, %s, %s, %s, %s)",
        [
            width, mode, end - timedelta(days=1), end, key, now + timedelta(seconds=due_in),
            "running" if running else "pending", "worker" if running else None,
            now + timedelta(hours=1) if running else None,
        ],
    )  # fmt: skip


def made(synclane, database_url: str) -> None:
    """The jobs table, empty."""
    with Operations(synclane, synclane.database(database_url)) as ops:
        ops.activity("shops")


def settle(synclane, database_url: str, slots: int) -> None:
    pool = WorkerPool(synclane, synclane.database(database_url), "shops", slots=slots)
    pool.run_until_settled()


def test_a_history_job_hands_a_one_job_lane_over_to_recurring_work_as_it_falls_due(database_url, schema, admin, caplog):
    """A history job of 12 pages runs; a recurring job falls due 0.2 s in: the history job's next page is its last
    before the recurring job's two, and it then finishes from its cursor (every page once)."""
    pages = Pages(history=12, recurring=2)
    synclane = declare(schema, orders(pages), owner_source=owners("acme"), rate=RATE)
    made(synclane, database_url)
    add(admin, schema, "initial", key="history")
    add(admin, schema, "recurring", key="fresh", due_in=0.2)
    with caplog.at_level("INFO", logger="synclane_provider"):
        settle(synclane, database_url, slots=1)
    assert [r for r in caplog.records if "over to its recurring work" in r.getMessage()]
    modes = pages.modes()
    first_fresh = modes.index("recurring")
    assert modes[first_fresh : first_fresh + 2] == ["recurring", "recurring"]
    assert first_fresh < 8, modes  # 0.2 s in, at 20 a second: after about 4 history pages, not after all 12
    history = [(cursor, job) for job, mode, cursor, _ in sorted(pages.sent, key=lambda s: s[3]) if mode == "initial"]
    assert [cursor for cursor, _ in history] == list(range(12))  # handed back at its cursor: no page twice
    assert {r["status"] for r in rows(admin, schema)} == {"completed"}


def test_history_keeps_to_its_share_of_a_wide_lanes_budget_while_recurring_work_runs(database_url, schema, admin):
    """A lane three wide at 20 a second: two history jobs and a recurring one run side by side. While the
    recurring job runs, history sends at most half the lane's pages (without the share it would send two
    thirds: three takers, one turn each)."""
    pages = Pages(history=60, recurring=20)
    synclane = declare(schema, orders(pages), owner_source=owners(Owner("acme", lane_width=3)), rate=RATE)
    made(synclane, database_url)
    for key in ("history-1", "history-2"):
        add(admin, schema, "initial", key=key, width=3)
    add(admin, schema, "recurring", key="fresh", width=3)
    settle(synclane, database_url, slots=3)
    fresh = [t for _, mode, _, t in pages.sent if mode == "recurring"]
    during = [mode for _, mode, _, t in pages.sent if min(fresh) <= t <= max(fresh)]
    assert during.count("initial") <= 0.55 * len(during), (during.count("initial"), len(during))
    assert {r["status"] for r in rows(admin, schema)} == {"completed"}


def test_without_recurring_work_due_history_has_the_whole_budget(database_url, schema, admin):
    pages = Pages(history=21, recurring=1)
    synclane = declare(schema, orders(pages), owner_source=owners("acme"), rate=RATE)
    made(synclane, database_url)
    add(admin, schema, "initial", key="history")
    started = time.monotonic()
    settle(synclane, database_url, slots=1)
    assert len(pages.sent) == 21
    assert time.monotonic() - started < 20 * RATE.interval.total_seconds() * 1.6  # 1.0 s at the rate; not 2.0


@pytest.mark.parametrize(("width", "hands_over"), [(1, True), (2, False)])
def test_a_history_page_hands_the_lane_over_only_when_the_due_recurring_job_has_no_slot(
    lane_store, database_url, schema, admin, width, hands_over
):
    """A history job runs and a recurring job is due: in a lane one wide the recurring job has no slot, so the
    history job's take says to hand the lane over after the page; in a lane two wide it has one."""
    made(declare(schema, orders(), owner_source=owners(Owner("acme", lane_width=width))), database_url)
    add(admin, schema, "initial", key="history", width=width, running=True)
    add(admin, schema, "recurring", key="fresh", width=width)
    take = LaneTake(cost=[RATE.interval], tolerance=[RATE.tolerance], history=True, lane_width=width,
                    history_cost=2 * RATE.interval)  # fmt: skip
    assert lane_store.take_turn("shops", "acme", take, now=None).yield_lane is hands_over
