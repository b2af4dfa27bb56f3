"""bench/summary.py marks a target met only from a figure its own run printed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "summary.py"


def summary_module():
    spec = importlib.util.spec_from_file_location("bench_summary", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_target_is_met_only_by_a_figure_the_run_printed_and_says_so_when_it_is_missed():
    summary = summary_module()
    rows = {row.what: row for row in summary.targets(100_000)}
    figures = {"ratio_8x100": 0.93, "ratio_8x100_commit_on": 0.95, "ratio_24x3": 0.61, "ratio_24x3_commit_on": 0.7}

    lines = summary.table(list(rows.values()), figures)

    assert (
        "| engine over raw SQL, 8 workers × 100 lanes, 1 page a job | ≥ 0.9 | 0.93 (commit on: 0.95) | met |" in lines
    )
    assert "| engine over raw SQL, 24 workers × 3 lanes | ≥ 0.8 | 0.61 (commit on: 0.70) | **not met** |" in lines
    unmeasured = [line for line in lines if "not measured in this run" in line]
    assert len(unmeasured) == len(rows) - 2 and not any(line.endswith("met |") for line in unmeasured)


def test_the_markers_it_writes_between_are_in_the_performance_document():
    summary = summary_module()
    text = summary.DOC.read_text()
    for start, end in (summary.GLANCE, summary.MATRIX):
        assert text.index(start) < text.index(end)
    rewritten = summary.replace_between(text, summary.GLANCE, "the new table")
    assert f"{summary.GLANCE[0]}\nthe new table\n{summary.GLANCE[1]}" in rewritten
    assert rewritten.count(summary.MATRIX[0]) == 1
