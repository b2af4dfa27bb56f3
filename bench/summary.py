"""The "At a glance" table of docs/performance.md, printed from one run of the benchmarks behind it.

Runs ``cycle.py`` (the engine against its raw SQL and procrastinate, both commit settings), ``plan.py`` (the
planner at a number of owners), ``lanes.py`` (lane overlaps with and without the lane index) and
``makespan.py``, one after the other, reads the ``key=value`` line each prints last, and prints the table:
every target beside the figure this run measured, "met" only when that figure meets it. The date and the
machine's load (before and after) head the table. With ``--write`` it also replaces the table, and the cycle
matrix (the cycle benchmark's own table, as printed), in docs/performance.md between their markers.

    .venv/bin/python bench/summary.py --quick --write   # cycle --quick, 10,000 owners: about 5 minutes
    .venv/bin/python bench/summary.py --write           # the full cycle matrix (1 and 10 pages) and
                                                        # 100,000 owners: about 40 minutes on a quiet machine
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DOC = BENCH.parent / "docs" / "performance.md"
GLANCE = ("<!-- summary.py: at a glance -->", "<!-- summary.py: end of at a glance -->")
MATRIX = ("<!-- summary.py: cycle matrix -->", "<!-- summary.py: end of cycle matrix -->")


@dataclass(frozen=True)
class Target:
    """One row: what is measured, the target in words, the figure as text, and whether it is met."""

    what: str
    target: str
    measured: Callable[[dict[str, float]], str]
    met: Callable[[dict[str, float]], bool] | None
    needs: tuple[str, ...]


def at_least(key: str, bound: float) -> Callable[[dict[str, float]], bool]:
    return lambda figures: figures[key] >= bound


def at_most(key: str, bound: float) -> Callable[[dict[str, float]], bool]:
    return lambda figures: figures[key] <= bound


def above(key: str, bound: float) -> Callable[[dict[str, float]], bool]:
    return lambda figures: figures[key] > bound


def targets(owners: int) -> list[Target]:
    per = f"{owners:,} owners"
    return [
        Target(
            "engine over raw SQL, 8 workers × 100 lanes, 1 page a job",
            "≥ 0.9",
            lambda f: f"{f['ratio_8x100']:.2f} (commit on: {f['ratio_8x100_commit_on']:.2f})",
            at_least("ratio_8x100", 0.9),
            ("ratio_8x100", "ratio_8x100_commit_on"),
        ),
        Target(
            "engine over raw SQL, 24 workers × 3 lanes",
            "≥ 0.8",
            lambda f: f"{f['ratio_24x3']:.2f} (commit on: {f['ratio_24x3_commit_on']:.2f})",
            at_least("ratio_24x3", 0.8),
            ("ratio_24x3", "ratio_24x3_commit_on"),
        ),
        Target(
            "wasted round trips, 24 workers × 3 lanes",
            "≤ 5 % of takes",
            lambda f: f"{f['wasted_24x3']:.1%} (commit on: {f['wasted_24x3_commit_on']:.1%})",
            at_most("wasted_24x3", 0.05),
            ("wasted_24x3", "wasted_24x3_commit_on"),
        ),
        Target(
            "engine over procrastinate (`lock` = lane), lowest point, `synchronous_commit` off on both sides",
            "> 1",
            lambda f: (
                f"{f['vs_procrastinate_min_commit_off']:.2f} (highest {f['vs_procrastinate_max_commit_off']:.2f})"
            ),
            above("vs_procrastinate_min_commit_off", 1.0),
            ("vs_procrastinate_min_commit_off", "vs_procrastinate_max_commit_off"),
        ),
        Target(
            "engine over procrastinate (`lock` = lane), lowest point, `synchronous_commit` on on both sides",
            "> 1",
            lambda f: f"{f['vs_procrastinate_min_commit_on']:.2f} (highest {f['vs_procrastinate_max_commit_on']:.2f})",
            above("vs_procrastinate_min_commit_on", 1.0),
            ("vs_procrastinate_min_commit_on", "vs_procrastinate_max_commit_on"),
        ),
        Target(
            f"first plan of {per} over a hand-written `INSERT … SELECT`",
            "≤ 1.5×",
            lambda f: f"{f['first_plan_ratio']:.2f}× ({f['first_plan_s']:.1f} s against {f['baseline_s']:.1f} s)",
            at_most("first_plan_ratio", 1.5),
            ("first_plan_ratio", "first_plan_s", "baseline_s"),
        ),
        Target(
            f"repeated plan of {per} (inserts nothing)",
            "≤ 1 s",
            lambda f: f"{f['replan_s']:.2f} s ({f['replan_ratio']:.2f}× a set-based coverage read)",
            at_most("replan_s", 1.0),
            ("replan_s", "replan_ratio"),
        ),
        Target(
            f"horizon raised 60 → 730 days, {per}, over the hand-written insert",
            "—",
            lambda f: f"{f['raise_horizon_ratio']:.2f}×",
            None,
            ("raise_horizon_ratio",),
        ),
        Target(
            "lane overlaps with the lane index / without it",
            "0 / some",
            lambda f: f"{f['overlaps_with_index']:.0f} / {f['overlaps_without_index']:.0f}",
            lambda f: f["overlaps_with_index"] == 0 and f["overlaps_without_index"] > 0,
            ("overlaps_with_index", "overlaps_without_index"),
        ),
        Target(
            "makespan efficiency, 40 owners, 8 lanes, 4 slots",
            "≥ 90 %",
            lambda f: f"{f['efficiency']:.1%}",
            at_least("efficiency", 0.9),
            ("efficiency",),
        ),
    ]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def run(script: str, *arguments: str) -> tuple[str, dict[str, float]]:
    """Run a benchmark with this Python, echoing its output; its output and the figures of its last line."""
    command = [sys.executable, str(BENCH / script), *arguments]
    print(f"$ bench/{script} {' '.join(arguments)}".rstrip(), flush=True)
    done = subprocess.run(command, check=True, text=True, stdout=subprocess.PIPE)
    print(done.stdout, end="", flush=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    figures = {key: float(value) for key, value in re.findall(r"(\w+)=([-0-9.einfa]+)", lines[-1])}
    return done.stdout, figures


def table(rows: list[Target], figures: dict[str, float]) -> list[str]:
    lines = ["| what | target | measured | |", "| --- | --- | --- | --- |"]
    for row in rows:
        if not all(key in figures for key in row.needs):
            lines.append(f"| {row.what} | {row.target} | not measured in this run | |")
            continue
        verdict = "" if row.met is None else ("met" if row.met(figures) else "**not met**")
        lines.append(f"| {row.what} | {row.target} | {row.measured(figures)} | {verdict} |")
    return lines


def replace_between(text: str, markers: tuple[str, str], body: str) -> str:
    start, end = markers
    if start not in text or end not in text:
        raise SystemExit(f"docs/performance.md has no {start} … {end} markers to write between")
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{body}\n{end}{after}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="cycle --quick, and 10,000 owners unless --owners")
    parser.add_argument("--owners", type=int, help="owners for plan.py (default 100,000; 10,000 with --quick)")
    parser.add_argument("--write", action="store_true", help="write the table and the cycle matrix to the docs")
    args = parser.parse_args()
    owners = args.owners or (10_000 if args.quick else 100_000)

    started, load_before = datetime.now(timezone.utc), load()
    figures: dict[str, float] = {}
    cycle_output, cycle = run("cycle.py", *(["--quick"] if args.quick else []))
    figures.update(cycle)
    figures.update(run("plan.py", "--owners", str(owners))[1])
    figures.update(run("lanes.py")[1])
    figures.update(run("makespan.py")[1])
    load_after = load()

    head = (
        f"Printed by `bench/summary.py{' --quick' if args.quick else ''}` from one run: "
        f"{started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs ({platform.machine()}), load average "
        f"(1 / 5 / 15 min) {load_before} at the start and {load_after} at the end. Only a figure measured "
        "in this run is marked met; timing ratios on a loaded machine are noisy (see The machine)."
    )
    glance = "\n".join([head, "", *table(targets(owners), figures)])
    cycle_table = [line for line in cycle_output.splitlines() if line.strip()]
    command = f"$ .venv/bin/python bench/cycle.py{' --quick' if args.quick else ''}"
    matrix = "\n".join(
        [
            f"From the same run as the table above ({started:%Y-%m-%d %H:%M} UTC, load {load_before} at its start):",
            "",
            "```",
            command,
            *cycle_table,
            "```",
        ]
    )
    print()
    print(glance)
    if args.write:
        text = DOC.read_text()
        text = replace_between(text, GLANCE, glance)
        text = replace_between(text, MATRIX, matrix)
        DOC.write_text(text)
        print(f"\nwritten to {DOC.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    main()
