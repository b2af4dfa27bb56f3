"""bench/concurrency.py: a quick run of many jobs in one slot prints every figure beside its target, completes
every job on every side, holds no more than the slot's connections (and the process's listening one) and leaves
none open."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "concurrency.py"
JUDGED = ["efficiency_threads", "efficiency_async", "connections_peak", "rss_mb_per_job", "vs_one_job_per_slot"]


@pytest.mark.slow
def test_a_quick_run_prints_each_figure_beside_its_target_and_keeps_to_the_slots_connections(database_url):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        env={**os.environ, "SYNCLANE_BENCH_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    figures = dict(item.split("=") for item in lines[-1].split())
    assert list(figures)[: len(JUDGED)] == JUDGED, lines[-1]
    for name in JUDGED:
        assert re.search(rf"^{name}: [0-9.]+ \(target [<>]= [0-9.]+: (held|missed)\)$", done.stdout, re.M), name
    assert 0 < float(figures["efficiency_threads"]) <= 1 and 0 < float(figures["efficiency_async"]) <= 1
    # the quick run's slot of 100 jobs: its 4 connections, and the process's one listening for wake-ups
    assert 1 <= int(figures["connections_peak"]) <= 4 + 1
    assert 4 < int(figures["connections_peak_one_job"]) <= int(figures["one_job_slots"])  # a connection a slot
    assert 0 < float(figures["rss_mb_per_job"]) < 10
    assert float(figures["vs_one_job_per_slot"]) > 0
    assert (figures["incomplete_runs"], figures["connections_left"]) == ("0", "0")
