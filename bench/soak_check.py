"""What the soak concludes from its witnesses: pure functions of the API's calls, the workers' acknowledged
writes, the faults injected and the table's final rows, so a test can plant each defect and see it counted.

* ``lost_pages``: a page of a job the API never served (every job ends completed, so every page is owed);
* ``lane_overlaps``: calls of one lane that began while another call of that lane was in flight;
* ``stuck_running``: jobs still running once the workers had the time to settle;
* ``duplicate_pages_beyond_crashes``: a page served again when nothing happened in between that explains
  it -- no kill of the process that had it, no termination of its connections, no server restart;
* ``wrong_counts``: completed jobs whose record count is not what the API served;
* ``acked_lost_without_crash``: a write the database acknowledged, later seen lost, with no immediate
  restart in between (a fast restart loses nothing a client was told was committed).

and the two costs of ``synchronous_commit = off`` that only an immediate restart may show:
``completed_run_again`` (jobs served a page after their completion was acknowledged) and
``cursors_gone_back`` (jobs served a page below a cursor whose save was acknowledged).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from soak_api import PAGE_RECORDS, Call, pages_of


@dataclass(frozen=True)
class Ack:
    """A write the database acknowledged to a worker: ``saved`` (with the page the cursor points at) or ``done``."""

    kind: str
    job: int
    page: int
    at: float


@dataclass
class Faults:
    """What the soak did, when: kills and terminations name the worker process hit."""

    kills: list[tuple[int, float]] = field(default_factory=list)
    terminations: list[tuple[int, float]] = field(default_factory=list)
    restarts: list[tuple[str, float, float]] = field(default_factory=list)  # (mode, began, ended)

    def counts(self) -> dict[str, int]:
        return {
            "worker_kills": len(self.kills),
            "connections_terminated": len(self.terminations),
            "fast_restarts": sum(1 for mode, _, _ in self.restarts if mode == "fast"),
            "immediate_restarts": sum(1 for mode, _, _ in self.restarts if mode == "immediate"),
        }

    def explains(self, pid: int, since: float, until: float) -> bool:
        """Whether a fault between ``since`` and ``until`` could make ``pid``'s page run again."""
        hit = any(p == pid and since <= t <= until for p, t in self.kills + self.terminations)
        return hit or any(began <= until and ended >= since for _, began, ended in self.restarts)

    def immediate_between(self, since: float, until: float) -> bool:
        return any(mode == "immediate" and began <= until and ended >= since for mode, began, ended in self.restarts)


@dataclass(frozen=True)
class Row:
    """A job as the table has it at the end."""

    id: int
    status: str
    processed_count: int


def parse_acks(text: str) -> list[Ack]:
    acks = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "saved":
            acks.append(Ack("saved", int(words[1]), int(words[2]), float(words[3])))
        elif len(words) == 3 and words[0] == "done":
            acks.append(Ack("done", int(words[1]), -1, float(words[2])))
        # a line cut short by a kill has fewer words and says nothing
    return acks


def lane_overlaps(calls: list[Call]) -> int:
    """Calls that began while an earlier call of the same lane had not ended."""
    by_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for call in calls:
        by_lane[call.lane].append((call.started, call.ended))
    overlaps = 0
    for spans in by_lane.values():
        latest_end = float("-inf")
        for started, ended in sorted(spans):
            if started < latest_end:
                overlaps += 1
            latest_end = max(latest_end, ended)
    return overlaps


def check(calls: list[Call], acks: list[Ack], faults: Faults, rows: list[Row]) -> dict[str, int]:
    """Every figure of the soak's last line (see the module docstring)."""
    served: dict[int, list[Call]] = defaultdict(list)
    for call in sorted(calls, key=lambda c: c.started):
        served[call.job].append(call)

    lost = sum(len(set(range(pages_of(row.id))) - {c.page for c in served[row.id]}) for row in rows)
    wrong = sum(
        1 for row in rows if row.status == "completed" and row.processed_count != pages_of(row.id) * PAGE_RECORDS
    )

    duplicates = unexplained = 0
    for job_calls in served.values():
        last_by_page: dict[int, Call] = {}
        for call in job_calls:
            before = last_by_page.get(call.page)
            if before is not None:
                duplicates += 1
                if not faults.explains(before.pid, before.started, call.started):
                    unexplained += 1
            last_by_page[call.page] = call

    run_again: set[int] = set()
    gone_back: set[int] = set()
    lost_without_crash = 0
    for ack in acks:
        job_calls = served.get(ack.job, [])
        starts = [c.started for c in job_calls]
        later = job_calls[bisect.bisect_right(starts, ack.at) :]
        betrayal = next((c for c in later if ack.kind == "done" or c.page < ack.page), None)
        if betrayal is None:
            continue
        (run_again if ack.kind == "done" else gone_back).add(ack.job)
        if not faults.immediate_between(ack.at, betrayal.started):
            lost_without_crash += 1

    return {
        "lost_pages": lost,
        "lane_overlaps": lane_overlaps(calls),
        "stuck_running": sum(1 for row in rows if row.status == "running"),
        "duplicate_pages_beyond_crashes": unexplained,
        "wrong_counts": wrong,
        "acked_lost_without_crash": lost_without_crash,
        "unfinished": sum(1 for row in rows if row.status != "completed"),
        "completed_run_again": len(run_again),
        "cursors_gone_back": len(gone_back),
        "duplicate_pages": duplicates,
        "pages_served": len(calls),
        "jobs": len(rows),
    }


MUST_BE_ZERO = (
    "lost_pages",
    "lane_overlaps",
    "stuck_running",
    "duplicate_pages_beyond_crashes",
    "wrong_counts",
    "acked_lost_without_crash",
    "unfinished",
)
